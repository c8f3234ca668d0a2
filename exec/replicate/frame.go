package replicate

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"
)

// The subscription's wire format, on a replica's connection after the
// transport's handshake (docs/serving.md): the replica writes Hello, then
// only reads; the pserver writes deltas, each a Begin frame, Rows frames
// and an End frame, and after the job's last step a Finished frame.
// Integers are little-endian.
//
//	hello     "PSGS" version(1)
//	begin     kind(1)=1 step(8) full(1)
//	rows      kind(1)=2 namelen(1) name first(8) stride(8) count(4) width(4) ids?(1) [ids count*8] values count*width*4
//	end       kind(1)=3
//	finished  kind(1)=4
//
// A rows frame holds count rows of width float32 values of the model's
// variable name: row first + i*stride for i < count, or with ids the rows
// listed (global row ids of a fixed table).
const (
	helloMagic   = "PSGS"
	helloVersion = 1

	kindBegin    = 1
	kindRows     = 2
	kindEnd      = 3
	kindFinished = 4
)

// MaxRowsBytes bounds one rows frame's values (a larger block is sent in
// several frames).
const MaxRowsBytes = 1 << 26

// WriteHello writes a replica's subscribe request.
func WriteHello(w io.Writer) error {
	_, err := w.Write(append([]byte(helloMagic), helloVersion))
	return err
}

// ReadHello reads a subscribe request.
func ReadHello(r io.Reader) error {
	var b [5]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return fmt.Errorf("subscribe request: %w", err)
	}
	if string(b[:4]) != helloMagic || b[4] != helloVersion {
		return errors.New("subscribe request: not a psgraph replica's (or another version)")
	}
	return nil
}

// Rows are rows of a model variable: First + i*Stride, or IDs.
type Rows struct {
	Name          string
	First, Stride int64
	IDs           []int64
	Width         int
	Values        []float32
}

// Count is how many rows r holds.
func (r *Rows) Count() int {
	if r.Width == 0 {
		return 0
	}
	return len(r.Values) / r.Width
}

// Writer writes a pserver's frames to a subscriber.
type Writer struct {
	w   *bufio.Writer
	buf []byte // values being encoded
}

func NewWriter(w io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 1<<16), buf: make([]byte, 1<<16)}
}

func (w *Writer) Begin(step int64, full bool) error {
	b := []byte{kindBegin}
	b = binary.LittleEndian.AppendUint64(b, uint64(step))
	f := byte(0)
	if full {
		f = 1
	}
	_, err := w.w.Write(append(b, f))
	return err
}

// Rows writes r, split into frames of at most MaxRowsBytes of values.
func (w *Writer) Rows(r Rows) error {
	if len(r.Name) == 0 || len(r.Name) > 255 || r.Width <= 0 || len(r.Values)%r.Width != 0 {
		return fmt.Errorf("rows of %q: a name of 1 to 255 bytes and whole rows", r.Name)
	}
	per := max(1, MaxRowsBytes/(4*r.Width))
	for n := r.Count(); n > 0; {
		k := min(n, per)
		part := Rows{Name: r.Name, First: r.First, Stride: r.Stride, Width: r.Width, Values: r.Values[:k*r.Width]}
		if r.IDs != nil {
			part.IDs = r.IDs[:k]
			r.IDs = r.IDs[k:]
		} else {
			r.First += int64(k) * r.Stride
		}
		r.Values = r.Values[k*r.Width:]
		n -= k
		if err := w.rows(part); err != nil {
			return err
		}
	}
	return nil
}

func (w *Writer) rows(r Rows) error {
	b := []byte{kindRows, byte(len(r.Name))}
	b = append(b, r.Name...)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.First))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Stride))
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Count()))
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Width))
	if r.IDs != nil {
		b = append(b, 1)
		for _, id := range r.IDs {
			b = binary.LittleEndian.AppendUint64(b, uint64(id))
		}
	} else {
		b = append(b, 0)
	}
	if _, err := w.w.Write(b); err != nil {
		return err
	}
	if littleEndian && len(r.Values) > 0 { // the wire's order: the values' bytes as they are
		_, err := w.w.Write(unsafe.Slice((*byte)(unsafe.Pointer(&r.Values[0])), 4*len(r.Values)))
		return err
	}
	for vals := r.Values; len(vals) > 0; {
		k := min(len(vals), len(w.buf)/4)
		for i, x := range vals[:k] {
			binary.LittleEndian.PutUint32(w.buf[4*i:], math.Float32bits(x))
		}
		if _, err := w.w.Write(w.buf[:4*k]); err != nil {
			return err
		}
		vals = vals[k:]
	}
	return nil
}

// littleEndian says whether this machine stores a float32 as the wire
// does, so values are written and read as their bytes.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// End ends a delta and writes it out.
func (w *Writer) End() error {
	if err := w.w.WriteByte(kindEnd); err != nil {
		return err
	}
	return w.w.Flush()
}

// Finished says the job ended: no delta follows.
func (w *Writer) Finished() error {
	if err := w.w.WriteByte(kindFinished); err != nil {
		return err
	}
	return w.w.Flush()
}

// Frame is one frame read: a Begin (Step, Full), Rows, End or Finished.
type Frame struct {
	Kind byte
	Step int64
	Full bool
	Rows Rows
}

// Frame kinds, as read.
const (
	FrameBegin    = kindBegin
	FrameRows     = kindRows
	FrameEnd      = kindEnd
	FrameFinished = kindFinished
)

// Reader reads a pserver's frames.
type Reader struct{ r *bufio.Reader }

func NewReader(r io.Reader) *Reader { return &Reader{bufio.NewReaderSize(r, 1<<16)} }

// Next reads the next frame; a malformed one is an error (the replica
// then drops the connection and subscribes again).
func (r *Reader) Next() (Frame, error) {
	k, err := r.r.ReadByte()
	if err != nil {
		return Frame{}, err
	}
	switch k {
	case kindBegin:
		var b [9]byte
		if _, err := io.ReadFull(r.r, b[:]); err != nil {
			return Frame{}, err
		}
		return Frame{Kind: k, Step: int64(binary.LittleEndian.Uint64(b[:8])), Full: b[8] == 1}, nil
	case kindEnd, kindFinished:
		return Frame{Kind: k}, nil
	case kindRows:
		n, err := r.r.ReadByte()
		if err != nil {
			return Frame{}, err
		}
		head := make([]byte, int(n)+8+8+4+4+1)
		if _, err := io.ReadFull(r.r, head); err != nil {
			return Frame{}, err
		}
		rw := Rows{Name: string(head[:n])}
		h := head[n:]
		rw.First, rw.Stride = int64(binary.LittleEndian.Uint64(h[:8])), int64(binary.LittleEndian.Uint64(h[8:16]))
		count, width := int(binary.LittleEndian.Uint32(h[16:20])), int(binary.LittleEndian.Uint32(h[20:24]))
		if n == 0 || width <= 0 || width > MaxRowsBytes/4 || count > MaxRowsBytes/4 || int64(count)*int64(width)*4 > MaxRowsBytes {
			return Frame{}, fmt.Errorf("a rows frame of %q: %d rows of %d values", rw.Name, count, width)
		}
		rw.Width = width
		if h[24] == 1 {
			rw.IDs = make([]int64, count)
			b := make([]byte, 8*count)
			if _, err := io.ReadFull(r.r, b); err != nil {
				return Frame{}, err
			}
			for i := range rw.IDs {
				rw.IDs[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
			}
		}
		rw.Values = make([]float32, count*width)
		if littleEndian && len(rw.Values) > 0 { // read straight into the values
			if _, err := io.ReadFull(r.r, unsafe.Slice((*byte)(unsafe.Pointer(&rw.Values[0])), 4*len(rw.Values))); err != nil {
				return Frame{}, err
			}
			return Frame{Kind: k, Rows: rw}, nil
		}
		b := make([]byte, 4*count*width)
		if _, err := io.ReadFull(r.r, b); err != nil {
			return Frame{}, err
		}
		for i := range rw.Values {
			rw.Values[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return Frame{Kind: k, Rows: rw}, nil
	}
	return Frame{}, fmt.Errorf("a frame of kind %d, which no psgraph pserver writes", k)
}
