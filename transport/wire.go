package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// Frame layout (docs/wire.md): every frame is a 16-byte little-endian
// header followed by its payload.
//
//	off size field
//	0   1    kind     (see below)
//	1   1    dtype    (data: DType; control frames: 0)
//	2   2    transfer (message stream: a data frame's transfer id, a bind
//	                   frame's new id; 0 otherwise)
//	4   4    length   (payload bytes)
//	8   8    step     (data: step; done: data messages sent to this peer; others: 0)
//
// Each side of a connection opens one message stream (preamble name
// length 0). It carries the small data frames of every transfer (kind 1,
// the payload at most maxInline bytes, the transfer named by its id),
// the bind frames that give a transfer its id on this connection (6: the
// name as payload), and done (2), resume (3: what this side received,
// sent once per connection before anything else) and abort (5: the
// reason text) frames. A payload above the sender's inline size goes on
// a bulk stream of its own transfer (preamble: the name), as data frames
// (1) or data frames resumed at a payload offset (4: the header, then the
// 8-byte offset, then the rest of the payload), transfer field 0.
const (
	frameHeader  = 16
	kindData     = 1
	kindDone     = 2
	kindResume   = 3
	kindDataAt   = 4
	kindAbort    = 5
	kindBind     = 6
	maxName      = 255
	maxInline    = 64 << 10 // the largest payload of a data frame on the message stream
	maxResume    = 1 << 20  // a resume frame lists at most maxStreams transfers
	maxReason    = 4 << 10  // an abort's reason text
	smallFrame   = 32 << 10 // bulk payloads up to this are copied next to their header: one yamux frame
	readChunk    = 4 << 20  // payload read granularity (watchdog progress)
	writeChunk   = 1 << 20  // a large payload's pieces: yamux frames of at most this (docs/wire.md, section 5)
	scratchBytes = 32 << 10
)

// errProtocol marks a malformed stream: the connection is closed.
var errProtocol = errors.New("transport: protocol violation")

type header struct {
	kind  byte
	dtype DType
	id    uint16 // message stream: the transfer id of a data or bind frame
	len   int
	step  int64
}

func putHeader(b []byte, h header) {
	b[0], b[1] = h.kind, byte(h.dtype)
	binary.LittleEndian.PutUint16(b[2:], h.id)
	binary.LittleEndian.PutUint32(b[4:], uint32(h.len))
	binary.LittleEndian.PutUint64(b[8:], uint64(h.step))
}

// parseHeader checks a header's structure; msg says whether it was read
// on the message stream or a bulk stream.
func parseHeader(b []byte, msg bool, maxFrame int) (header, error) {
	h := header{kind: b[0], dtype: DType(b[1]), id: binary.LittleEndian.Uint16(b[2:]),
		len: int(binary.LittleEndian.Uint32(b[4:])), step: int64(binary.LittleEndian.Uint64(b[8:]))}
	onMsg := h.kind == kindData || h.kind == kindDone || h.kind == kindResume || h.kind == kindAbort || h.kind == kindBind
	onBulk := h.kind == kindData || h.kind == kindDataAt
	switch {
	case msg && !onMsg, !msg && !onBulk:
		return h, fmt.Errorf("%w: frame kind %d on a %s stream", errProtocol, h.kind, map[bool]string{true: "message", false: "bulk"}[msg])
	case !msg && h.id != 0:
		return h, fmt.Errorf("%w: flags %#x", errProtocol, b[2:4])
	case msg && h.kind != kindData && h.kind != kindBind && h.id != 0:
		return h, fmt.Errorf("%w: transfer %d on a control frame", errProtocol, h.id)
	case msg && h.kind == kindData && (h.id == 0 || h.len > maxInline):
		return h, fmt.Errorf("%w: data frame of transfer %d, %d bytes, on the message stream (at most %d)", errProtocol, h.id, h.len, maxInline)
	case h.kind == kindBind && (h.id == 0 || h.len == 0 || h.len > maxName || h.dtype != 0 || h.step != 0):
		return h, fmt.Errorf("%w: malformed bind frame", errProtocol)
	case h.kind == kindDone && (h.len != 0 || h.dtype != 0 || h.step < 0):
		return h, fmt.Errorf("%w: malformed done frame", errProtocol)
	case h.kind == kindResume && (h.len > maxResume || h.dtype != 0 || h.step != 0):
		return h, fmt.Errorf("%w: malformed resume frame", errProtocol)
	case h.kind == kindAbort && (h.len > maxReason || h.dtype != 0 || h.step != 0):
		return h, fmt.Errorf("%w: malformed abort frame", errProtocol)
	case h.len > maxFrame:
		return h, fmt.Errorf("%w: frame of %d bytes above the limit of %d", errProtocol, h.len, maxFrame)
	}
	return h, nil
}

// frameReader is what the readers of a connection's streams share: where
// their messages go, the counters, and the slow-sender watchdog's
// deadline.
type frameReader struct {
	in       *inbox
	src      NodeID
	inc      uint64 // the sender's incarnation on this connection
	maxFrame int
	deadline *atomic.Int64 // unix nanos by which the current frame must progress; 0 idle
	timeout  time.Duration
	msgs     *atomic.Int64
	payload  *atomic.Int64   // data payload bytes read (Traffic.Recv); nil: not counted
	dead     <-chan struct{} // closed when the connection ended
}

// got counts n payload bytes read from the stream.
func (d *frameReader) got(n int) {
	if d.payload != nil && n > 0 {
		d.payload.Add(int64(n))
	}
}

// delivered counts a data message.
func (d *frameReader) delivered() {
	if d.msgs != nil {
		d.msgs.Add(1)
	}
}

func (d *frameReader) busy() {
	if d.deadline != nil {
		d.deadline.Store(time.Now().Add(d.timeout).UnixNano())
	}
}

func (d *frameReader) idle() {
	if d.deadline != nil {
		d.deadline.Store(0)
	}
}

// lost turns a read error into a protocol violation, unless the
// connection itself ended (then it is the loss, and nothing to report).
func (d *frameReader) lost(what string, err error) error {
	select {
	case <-d.dead:
		return fmt.Errorf("connection lost in %s: %w", what, err)
	default:
		return fmt.Errorf("%w: truncated %s: %v", errProtocol, what, err)
	}
}

// decoder reads the frames of one bulk stream (one transfer's large
// payloads) from src into the inbox. A header is validated (structure,
// then inbox.check) before its payload is read; a rejected message's
// payload is skipped through a fixed scratch buffer, so nothing a peer
// sends makes memory grow beyond the accepted specs. A payload above the
// inbox's eager size is read only once a recv claimed it, straight into
// the receiver's memory (inbox.hold).
type decoder struct {
	frameReader
	name    string // the transfer
	hdr     [frameHeader]byte
	off     [8]byte
	scratch []byte
}

// run decodes until r fails; io.EOF at a frame boundary is a clean end.
func (d *decoder) run(r io.Reader) error {
	for {
		d.idle()
		if _, err := io.ReadFull(r, d.hdr[:1]); err != nil {
			return err
		}
		d.busy()
		if _, err := io.ReadFull(r, d.hdr[1:]); err != nil {
			return d.lost("header", err)
		}
		h, err := parseHeader(d.hdr[:], false, d.maxFrame)
		if err != nil {
			return err
		}
		off := 0
		if h.kind == kindDataAt {
			if _, err := io.ReadFull(r, d.off[:]); err != nil {
				return d.lost("header", err)
			}
			o := binary.LittleEndian.Uint64(d.off[:])
			if o == 0 || o > uint64(d.maxFrame) {
				return fmt.Errorf("%w: resumed at byte %d", errProtocol, o)
			}
			off = int(o)
		}
		if err := d.in.check(d.src, d.inc, h.step, d.name, h.dtype, off+h.len); err != nil {
			if errors.Is(err, ErrClosed) {
				return err
			}
			if off > 0 { // the sender changed a message it resumes
				return fmt.Errorf("%w: %v", errProtocol, err)
			}
			d.in.onError(err)
			if err := d.skip(r, h.len); err != nil {
				return err
			}
			d.in.rejected(d.src, d.inc, d.name, h.step, d.name, err)
			continue
		}
		if off == 0 && d.in.readAhead(d.src, d.name, h.len) {
			buf := d.in.buffer(h.len)
			if err := d.read(r, buf); err != nil {
				d.in.recycleBuf(buf)
				return err
			}
			d.delivered()
			d.in.deliver(d.src, d.inc, d.name, h.step, d.name, buf)
			continue
		}
		held, err := d.in.hold(d.src, d.inc, h.step, d.name, off+h.len, off)
		if err != nil {
			return err
		}
		if err := d.feed(r, held, h.len); err != nil {
			return err
		}
	}
}

// feed reads the left payload bytes of a held message into the receivers
// that claim it, or skips them once it is dropped.
func (d *decoder) feed(r io.Reader, h *held, left int) error {
	for left > 0 {
		d.idle() // waiting for a claim can take a step
		t, ok, err := d.in.next(h, d.dead)
		d.busy()
		if err != nil {
			return err
		}
		if !ok {
			if err := d.skip(r, left); err != nil {
				d.in.park(h, err)
				return err
			}
			d.in.skipped(h)
			return nil
		}
		var buf []byte
		if t.sink != nil {
			buf = t.sink.Next(t.off)
		} else {
			buf = t.dst[t.off:]
		}
		k := min(len(buf), readChunk, left)
		if k <= 0 {
			err := fmt.Errorf("transport: receiver of %s gave an empty buffer at byte %d", h.v, t.off)
			d.in.park(h, err) // answers the claim
			return err
		}
		n, err := readFull(r, buf[:k])
		d.got(n)
		if err != nil {
			err = d.lost("payload", err)
			d.in.park(h, err)
			return err
		}
		if t.sink != nil {
			t.sink.Filled(t.off, buf[:k])
		}
		left -= k
		// Count the message before filled hands it to its receiver, so
		// a peer that saw the receiver's answer also sees the count.
		if t.off+k >= h.n {
			d.delivered()
		}
		d.in.filled(h, k)
	}
	return nil
}

// readFull is io.ReadFull, through the stream's own ReadFull where it
// has one: third_party/yamux's reads the data frames that arrive straight
// into buf, with one wake-up a frame and no copy through its buffer.
func readFull(r io.Reader, buf []byte) (int, error) {
	if f, ok := r.(interface{ ReadFull([]byte) (int, error) }); ok {
		return f.ReadFull(buf)
	}
	return io.ReadFull(r, buf)
}

func (d *decoder) read(r io.Reader, buf []byte) error {
	for len(buf) > 0 {
		n, err := readFull(r, buf[:min(len(buf), readChunk)])
		d.got(n)
		if err != nil {
			return d.lost("payload", err)
		}
		buf = buf[n:]
		d.busy()
	}
	return nil
}

func (d *decoder) skip(r io.Reader, n int) error {
	if d.scratch == nil {
		d.scratch = make([]byte, scratchBytes)
	}
	for n > 0 {
		m, err := io.ReadFull(r, d.scratch[:min(n, len(d.scratch))])
		d.got(m) // a rejected or dropped payload crossed the wire too
		if err != nil {
			return d.lost("payload", err)
		}
		n -= m
		d.busy()
	}
	return nil
}

// A resume frame's payload: per transfer, u8 name length, the name, u64
// messages received, u64 bytes received of the next one.
func appendResume(b []byte, rps []resumePoint) []byte {
	for _, rp := range rps {
		b = append(b, byte(len(rp.v)))
		b = append(b, rp.v...)
		b = binary.LittleEndian.AppendUint64(b, uint64(rp.count))
		b = binary.LittleEndian.AppendUint64(b, uint64(rp.off))
	}
	return b
}

func parseResume(b []byte) ([]resumePoint, error) {
	var rps []resumePoint
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n+16 || len(rps) >= maxStreams+1 {
			return nil, fmt.Errorf("%w: malformed resume frame", errProtocol)
		}
		rp := resumePoint{v: string(b[1 : 1+n]),
			count: int64(binary.LittleEndian.Uint64(b[1+n:])), off: int64(binary.LittleEndian.Uint64(b[9+n:]))}
		if rp.count < 0 || rp.off < 0 {
			return nil, fmt.Errorf("%w: malformed resume frame", errProtocol)
		}
		rps = append(rps, rp)
		b = b[1+n+16:]
	}
	return rps, nil
}

// readPreamble reads a stream's first bytes: the length of the transfer
// name (0: the message stream) and the name.
func readPreamble(r io.Reader) (string, error) {
	var l [1]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return "", fmt.Errorf("%w: stream preamble: %v", errProtocol, err)
	}
	name := make([]byte, l[0])
	if _, err := io.ReadFull(r, name); err != nil {
		return "", fmt.Errorf("%w: stream preamble: %v", errProtocol, err)
	}
	return string(name), nil
}
