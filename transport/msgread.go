package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/yamux"
)

// The reader of a connection's message stream (docs/wire.md, section 3):
// it takes the peer's small messages of every transfer, its bind, done,
// abort and resume frames, in yamux's receive loop: the stream's sink
// (Stream.SetSink, third_party/yamux) is handed each yamux data frame as
// the loop reads it from the connection, reads it into the reader's
// buffer and hands every complete frame in it to the inbox under one
// lock: a data frame is checked, then copied into the memory of the recv
// waiting for it (which wakes, the only wake-up of the message's way in),
// or else into a recycled buffer queued for its recv. No goroutine per
// transfer or per stream, and no wake-up of a reader per message.

const (
	msgBufMin = 32 << 10  // the read buffer's size; it grows only to hold a frame begun
	msgBufMax = 256 << 10 // a bound on it, with a frame (FuzzFrameDecode checks it)
)

// msgReader reads one message stream.
type msgReader struct {
	frameReader
	resumed func([]resumePoint) error // the peer's resume frame
	reads   *atomic.Int64             // yamux frames taken (Stats.BatchesRecv); nil: not counted
	names   []string                  // transfer id i+1 -> name, bound by the peer's bind frames
	buf     []byte
	r, w    int // buf[r:w] is read and not yet handled

	big  []byte // a control frame larger than buf, being read (its body)
	bigH header
	bigN int // bytes of big read

	mu  sync.Mutex // the sink's, against the bytes SetSink returned
	err error      // the sink's first error: the connection ends
}

// attach has yamux's receive loop hand st's frames to m (the sink), then
// waits for the stream's end; io.EOF between frames is a clean end.
func (m *msgReader) attach(st *yamux.Stream) error {
	m.mu.Lock()
	if b := st.SetSink(m.sink); len(b) > 0 {
		m.take(bytes.NewReader(b), len(b))
	}
	m.mu.Unlock()
	var one [1]byte
	_, err := st.Read(one[:]) // nothing comes but the end: the sink took the data
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.end(err)
}

// sink takes one yamux frame of n bytes from r (yamux's receive loop).
func (m *msgReader) sink(r io.Reader, n int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.take(r, n)
}

// take reads n bytes from r and handles the frames they complete; after
// an error it takes nothing more.
func (m *msgReader) take(r io.Reader, n int) error {
	if m.err == nil {
		if m.reads != nil {
			m.reads.Add(1)
		}
		m.err = m.fill(r, n)
	}
	return m.err
}

// end is the stream's end with err: io.EOF between frames is a clean
// one, a frame cut short by it a truncated frame.
func (m *msgReader) end(err error) error {
	if m.err != nil {
		return m.err
	}
	if m.r < m.w || m.big != nil {
		return m.lost("frame", err)
	}
	return err
}

// fill reads n bytes from r into the buffer (or the large control frame
// being read) and handles every frame they complete. An error reading r
// is the connection's, not a protocol error.
func (m *msgReader) fill(r io.Reader, n int) error {
	if m.buf == nil {
		m.buf = make([]byte, msgBufMin)
	}
	for n > 0 {
		var dst []byte
		if m.big != nil {
			dst = m.big[m.bigN:min(len(m.big), m.bigN+n)]
		} else {
			if m.r == m.w {
				m.r, m.w = 0, 0
			}
			if m.w == len(m.buf) {
				m.room()
			}
			if m.w == len(m.buf) { // frames makes room for a frame begun; a guard
				m.grow(2 * len(m.buf))
			}
			dst = m.buf[m.w:min(len(m.buf), m.w+n)]
		}
		if _, err := io.ReadFull(r, dst); err != nil {
			return fmt.Errorf("reading the message stream: %w", err)
		}
		n -= len(dst)
		if m.big != nil {
			if m.bigN += len(dst); m.bigN == len(m.big) {
				b := m.big
				m.big = nil
				if err := m.control(m.bigH, b); err != nil {
					return err
				}
			}
			continue
		}
		m.w += len(dst)
		if err := m.frames(); err != nil {
			return err
		}
	}
	if m.r == m.w && m.big == nil {
		m.r, m.w = 0, 0
		m.idle()
	} else {
		m.busy() // a frame has begun: it must make progress
	}
	return nil
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
// under one lock of the inbox, control frames one by one. A control
// frame whose body does not fit the buffer (a resume frame of many
// transfers) is read into a slice of its own (fill).
func (m *msgReader) frames() error {
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
				m.big, m.bigH = make([]byte, h.len), h
				m.bigN = copy(m.big, m.buf[m.r+frameHeader:m.w])
				m.r, m.w = 0, 0
				return nil
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
