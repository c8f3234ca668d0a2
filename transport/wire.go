package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// Frame layout (docs/wire.md): every message on a transfer stream is a
// 16-byte little-endian header followed by the raw payload.
//
//	off size field
//	0   1    kind    (1 data, 2 done)
//	1   1    dtype   (data: DType; done: 0)
//	2   2    flags   (must be 0)
//	4   4    length  (data: payload bytes; done: 0)
//	8   8    step    (data: step; done: data messages sent to this peer)
const (
	frameHeader = 16
	kindData    = 1
	kindDone    = 2
	maxName     = 255
	smallFrame  = 32 << 10 // payloads up to this are copied next to their header: one yamux frame
	readChunk   = 4 << 20  // payload read granularity (watchdog progress)
	writeChunk  = 256 << 10
)

// errProtocol marks a malformed stream: the connection is closed.
var errProtocol = errors.New("transport: protocol violation")

type header struct {
	kind  byte
	dtype DType
	len   int
	step  int64
}

func putHeader(b []byte, h header) {
	b[0], b[1], b[2], b[3] = h.kind, byte(h.dtype), 0, 0
	binary.LittleEndian.PutUint32(b[4:], uint32(h.len))
	binary.LittleEndian.PutUint64(b[8:], uint64(h.step))
}

// parseHeader checks a header's structure; control says whether it was
// read on the control stream (done frames) or a transfer stream (data).
func parseHeader(b []byte, control bool, maxFrame int) (header, error) {
	h := header{kind: b[0], dtype: DType(b[1]),
		len: int(binary.LittleEndian.Uint32(b[4:])), step: int64(binary.LittleEndian.Uint64(b[8:]))}
	switch {
	case b[2] != 0 || b[3] != 0:
		return h, fmt.Errorf("%w: flags %#x", errProtocol, b[2:4])
	case control && h.kind != kindDone, !control && h.kind != kindData:
		return h, fmt.Errorf("%w: frame kind %d on a %s stream", errProtocol, h.kind, map[bool]string{true: "control", false: "transfer"}[control])
	case h.kind == kindDone && (h.len != 0 || h.dtype != 0 || h.step < 0):
		return h, fmt.Errorf("%w: malformed done frame", errProtocol)
	case h.len > maxFrame:
		return h, fmt.Errorf("%w: frame of %d bytes above the limit of %d", errProtocol, h.len, maxFrame)
	}
	return h, nil
}

// decoder reads the frames of one stream from src into the inbox. A header
// is validated (structure, then inbox.check) before its payload is read;
// a rejected message's payload is skipped through a fixed scratch buffer,
// so nothing a peer sends makes memory grow beyond the accepted specs.
type decoder struct {
	in       *inbox
	src      NodeID
	inc      uint64 // the sender's incarnation on this connection
	name     string // "" on the control stream
	maxFrame int
	hdr      [frameHeader]byte
	scratch  []byte
	deadline *atomic.Int64 // unix nanos by which the current frame must progress; 0 idle
	timeout  time.Duration
	msgs     *atomic.Int64
}

func (d *decoder) busy() {
	if d.deadline != nil {
		d.deadline.Store(time.Now().Add(d.timeout).UnixNano())
	}
}

func (d *decoder) idle() {
	if d.deadline != nil {
		d.deadline.Store(0)
	}
}

// run decodes until r fails; io.EOF at a frame boundary is a clean end.
func (d *decoder) run(r io.Reader) error {
	control := d.name == ""
	for {
		d.idle()
		if _, err := io.ReadFull(r, d.hdr[:1]); err != nil {
			return err
		}
		d.busy()
		if _, err := io.ReadFull(r, d.hdr[1:]); err != nil {
			return fmt.Errorf("%w: truncated header: %v", errProtocol, err)
		}
		h, err := parseHeader(d.hdr[:], control, d.maxFrame)
		if err != nil {
			return err
		}
		if control {
			d.in.done(d.src, d.inc, h.step)
			continue
		}
		if err := d.in.check(d.src, d.inc, h.step, d.name, h.dtype, h.len); err != nil {
			if errors.Is(err, ErrClosed) {
				return err
			}
			d.in.onError(err)
			if err := d.skip(r, h.len); err != nil {
				return err
			}
			d.in.rejected(d.src, d.inc)
			continue
		}
		buf := d.in.buffer(h.len)
		if err := d.read(r, buf); err != nil {
			d.in.recycleBuf(buf)
			return err
		}
		if d.msgs != nil {
			d.msgs.Add(1)
		}
		d.in.deliver(d.src, d.inc, h.step, d.name, buf)
	}
}

func (d *decoder) read(r io.Reader, buf []byte) error {
	for len(buf) > 0 {
		n := min(len(buf), readChunk)
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return fmt.Errorf("%w: truncated payload: %v", errProtocol, err)
		}
		buf = buf[n:]
		d.busy()
	}
	return nil
}

func (d *decoder) skip(r io.Reader, n int) error {
	if d.scratch == nil {
		d.scratch = make([]byte, 32<<10)
	}
	for n > 0 {
		m := min(n, len(d.scratch))
		if _, err := io.ReadFull(r, d.scratch[:m]); err != nil {
			return fmt.Errorf("%w: truncated payload: %v", errProtocol, err)
		}
		n -= m
		d.busy()
	}
	return nil
}

// readPreamble reads a stream's first bytes: the length of the transfer
// name (0: the control stream) and the name.
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
