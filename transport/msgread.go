package transport

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"
)

// The reader of a connection's message stream (docs/wire.md, section 3):
// one goroutine per connection reads the peer's small messages of every
// transfer, its bind, done, abort and resume frames. It reads as much as
// the stream holds at once into its buffer (a burst of frames, written by
// the peer as one yamux frame, is one read) and hands every complete
// frame in it to the inbox under one lock: a data frame is checked, then
// copied into the memory of the recv waiting for it, or else into a
// recycled buffer queued for its recv. No goroutine per transfer, and no
// stream read per message.

const (
	msgBufMin = 32 << 10  // the read buffer's first size
	msgBufMax = 256 << 10 // it grows, while reads fill it, up to this
)

// msgReader reads one message stream.
type msgReader struct {
	frameReader
	resumed func([]resumePoint) error // the peer's resume frame
	reads   *atomic.Int64             // reads that returned bytes (Stats.BatchesRecv); nil: not counted
	names   []string                  // transfer id i+1 -> name, bound by the peer's bind frames
	buf     []byte
	r, w    int // buf[r:w] is read and not yet handled
}

// run reads frames until rd fails; io.EOF between frames is a clean end.
func (m *msgReader) run(rd io.Reader) error {
	if m.buf == nil {
		m.buf = make([]byte, msgBufMin)
	}
	for {
		if err := m.frames(rd); err != nil {
			return err
		}
		if m.r == m.w {
			m.r, m.w = 0, 0
			m.idle()
		} else {
			m.busy() // a frame has begun: it must make progress
		}
		if m.w == len(m.buf) {
			m.room()
		}
		n, err := rd.Read(m.buf[m.w:])
		m.w += n
		if n > 0 && m.reads != nil {
			m.reads.Add(1)
		}
		if err == nil {
			if m.w == len(m.buf) && len(m.buf) < msgBufMax && n > len(m.buf)/2 {
				m.grow(min(2*len(m.buf), msgBufMax)) // bursts fill it: read more at once
			}
			continue
		}
		if n > 0 {
			if err := m.frames(rd); err != nil {
				return err
			}
		}
		if m.r == m.w && err == io.EOF {
			return io.EOF
		}
		if m.r < m.w {
			return m.lost("frame", err)
		}
		return err
	}
}

// room makes room at the end of the buffer for the rest of a frame.
func (m *msgReader) room() {
	if m.r > 0 {
		copy(m.buf, m.buf[m.r:m.w])
		m.w -= m.r
		m.r = 0
	}
}

func (m *msgReader) grow(n int) {
	b := make([]byte, n)
	copy(b, m.buf[m.r:m.w])
	m.buf, m.w, m.r = b, m.w-m.r, 0
}

// frames handles the complete frames in the buffer: runs of data frames
// under one lock of the inbox, control frames one by one. A frame whose
// payload does not fit the buffer (only a resume frame can be larger) is
// read whole from rd.
func (m *msgReader) frames(rd io.Reader) error {
	for m.w-m.r >= frameHeader {
		h, err := parseHeader(m.buf[m.r:m.r+frameHeader], true, m.maxFrame)
		if err != nil {
			return err
		}
		need := frameHeader + h.len
		if m.w-m.r < need {
			if need > len(m.buf) {
				if h.kind == kindData || h.kind == kindBind {
					m.grow(need) // at most a header and maxInline bytes
					return nil
				}
				return m.bigControl(rd, h)
			}
			if m.r+need > len(m.buf) {
				m.room()
			}
			return nil
		}
		if h.kind == kindData {
			if err := m.data(); err != nil {
				return err
			}
			continue
		}
		body := m.buf[m.r+frameHeader : m.r+need]
		m.r += need
		if err := m.control(h, body); err != nil {
			return err
		}
	}
	if m.r+frameHeader > len(m.buf) {
		m.room()
	}
	return nil
}

// data hands the run of complete data frames at m.r to the inbox, under
// one lock.
func (m *msgReader) data() error {
	in := m.in
	in.mu.Lock()
	defer in.mu.Unlock()
	for m.w-m.r >= frameHeader && m.buf[m.r] == kindData {
		h, err := parseHeader(m.buf[m.r:m.r+frameHeader], true, m.maxFrame)
		if err != nil {
			return err
		}
		if m.w-m.r < frameHeader+h.len {
			return nil
		}
		if int(h.id) > len(m.names) {
			return fmt.Errorf("%w: data frame of transfer %d, which was not bound", errProtocol, h.id)
		}
		v := m.names[h.id-1]
		payload := m.buf[m.r+frameHeader : m.r+frameHeader+h.len]
		m.r += frameHeader + h.len
		m.got(h.len)
		err = in.arriveLocked(m.src, m.inc, "", h.step, v, h.dtype, payload)
		switch {
		case err == nil:
			m.delivered()
		case errors.Is(err, ErrClosed):
			return err
		default:
			in.onError(err)
			in.rejectedLocked(m.src, m.inc, "", h.step, v, err)
		}
	}
	return nil
}

// control handles a bind, done, abort or resume frame.
func (m *msgReader) control(h header, body []byte) error {
	switch h.kind {
	case kindBind:
		if int(h.id) != len(m.names)+1 || len(m.names) >= maxStreams {
			return fmt.Errorf("%w: bind frame of transfer %d after %d transfers", errProtocol, h.id, len(m.names))
		}
		m.names = append(m.names, string(body))
		return nil
	case kindDone:
		m.in.done(m.src, m.inc, h.step)
		return nil
	case kindAbort:
		m.in.abort(m.src, m.inc, string(body))
		return nil
	}
	rps, err := parseResume(body)
	if err != nil {
		return err
	}
	if m.resumed == nil {
		return nil
	}
	return m.resumed(rps)
}

// bigControl reads a control frame larger than the buffer (a resume frame
// of many transfers): what is buffered of it, then the rest.
func (m *msgReader) bigControl(rd io.Reader, h header) error {
	b := make([]byte, h.len)
	k := copy(b, m.buf[m.r+frameHeader:m.w])
	m.r, m.w = 0, 0
	m.busy()
	if _, err := io.ReadFull(rd, b[k:]); err != nil {
		return m.lost("control frame", err)
	}
	return m.control(h, b)
}
