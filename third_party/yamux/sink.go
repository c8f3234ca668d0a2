package yamux

// A stream's sink (psgraph's patch; README.psgraph.md).

import (
	"bytes"
	"io"
)

// SetSink has the session's receive loop hand every later data frame of
// the stream to sink as it reads it (psgraph's patch): sink must read
// exactly n bytes from r, in the receive loop's goroutine, and must not
// wait for anything the session's other streams or a Read would bring.
// No Read is woken per frame and nothing is buffered: a reader that would
// wait for each frame and hand it on costs a goroutine wake-up per
// frame. SetSink returns the bytes buffered before it, which the caller
// handles first (ordering them before the sink's frames is its job). An
// error of sink ends the session. A Read of the stream then waits until
// the stream closes and returns its end (io.EOF at a close); the frame
// closing it reached sink first.
func (s *Stream) SetSink(sink func(r io.Reader, n int) error) []byte {
	s.recvLock.Lock()
	var b []byte
	if s.recvBuf != nil && s.recvBuf.Len() > 0 {
		b = bytes.Clone(s.recvBuf.Bytes())
		s.recvBuf.Reset()
	}
	s.sink = sink
	s.recvLock.Unlock()
	if len(b) > 0 {
		s.windowUpdateAfterRead()
	}
	return b
}

// sinkOf returns the stream's sink (nil: none). The sink, once set, takes
// every data frame of the stream from the receive loop as it is read;
// guarded by recvLock.
func (s *Stream) sinkOf() func(io.Reader, int) error {
	s.recvLock.Lock()
	defer s.recvLock.Unlock()
	return s.sink
}

// errSink is an error of a stream's sink: the session ends without the
// protocol-error go-away frame (the sink's owner reports it).
type errSink struct{ err error }

func (e errSink) Error() string { return e.err.Error() }
func (e errSink) Unwrap() error { return e.err }

// sinkData hands a data frame to the stream's sink, then processes its
// flags: a FIN is seen by a waiting Read only after the sink took the
// frame's bytes.
func (s *Stream) sinkData(hdr header, flags uint16, conn io.Reader, sink func(io.Reader, int) error) error {
	if err := s.sinkBody(hdr, conn, sink); err != nil {
		return err
	}
	return s.processFlags(flags)
}

// sinkBody hands a data frame's bytes to the stream's sink, counting them
// against the receive window.
func (s *Stream) sinkBody(hdr header, conn io.Reader, sink func(io.Reader, int) error) error {
	if length := hdr.Length(); length > 0 {
		s.recvLock.Lock()
		if length > s.recvWindow {
			s.session.logger.Printf("[ERR] yamux: receive window exceeded (stream: %d, remain: %d, recv: %d)", s.id, s.recvWindow, length)
			s.recvLock.Unlock()
			return ErrRecvWindowExceeded
		}
		s.recvWindow -= length
		max := s.session.config.MaxStreamWindowSize
		due := max-s.recvWindow >= max/2
		s.recvLock.Unlock()
		if err := sink(conn, int(length)); err != nil {
			return errSink{err}
		}
		if due {
			// Not from this goroutine: a send may wait for the connection,
			// which waits for the peer, which may wait for this loop.
			go s.windowUpdateAfterRead()
		}
	}
	return nil
}
