package replicate

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"sync"
	"unsafe"
)

// The subscription's wire format, on a replica's connection after the
// transport's handshake (docs/serving.md): the replica writes Hello, then
// only reads; the pserver writes deltas, each a Begin frame, Rows frames
// and an End frame, and after the job's last step a Finished frame.
// Trainer 0 pushes the model state it holds (batch_norm's running
// statistics, a parameter placed on it) to pserver 0 on a connection of
// the same kind: it writes the push hello, then deltas of its state
// (each full), and the pserver answers each with an ack once it holds
// it. Integers are little-endian.
//
//	hello     "PSGS" version(1)  (subscribe)
//	          "PSGT" version(1)  (push trainer 0's state)
//	ack       1
//	begin     kind(1)=1 step(8) full(1)
//	rows      kind(1)=2 namelen(1) name first(8) stride(8) count(4) width(4) by(1)
//	          [by=1: ids count*8] [by=2: keys count*8 meta count*8] values count*width*4
//	end       kind(1)=3
//	finished  kind(1)=4
//	shard     kind(1)=5 namelen(1) name shard(4) shards(4) watermark(8)
//
// A rows frame holds count rows of width float32 values of the model's
// variable name: row first + i*stride for i < count (by=0), the rows
// listed (by=1: global row ids of a fixed table), or a dynamic table's
// rows by key, each with its meta (by=2: the row's last-seen step and
// sightings, or its LFU priority, which its eviction scores). A shard
// frame gives the eviction watermark of a pserver's shard of dynamic
// table name (shard of shards): its rows scored at or under it are dead;
// in a full delta it also says the shard's rows are all in the delta
// (the replica forgets those it held).
const (
	helloMagic   = "PSGS"
	pushMagic    = "PSGT"
	helloVersion = 2
	ackByte      = 1

	kindBegin    = 1
	kindRows     = 2
	kindEnd      = 3
	kindFinished = 4
	kindShard    = 5

	byRange = 0
	byIDs   = 1
	byKeys  = 2
)

// MaxRowsBytes bounds one rows frame's values (a larger block is sent in
// several frames).
const MaxRowsBytes = 1 << 26

// WriteHello writes a replica's subscribe request.
func WriteHello(w io.Writer) error {
	_, err := w.Write(append([]byte(helloMagic), helloVersion))
	return err
}

// WritePushHello writes trainer 0's request to push its state.
func WritePushHello(w io.Writer) error {
	_, err := w.Write(append([]byte(pushMagic), helloVersion))
	return err
}

// ReadHello reads a subscribe request, or (push) a request to push a
// trainer's state.
func ReadHello(r io.Reader) (push bool, err error) {
	var b [5]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return false, fmt.Errorf("subscribe request: %w", err)
	}
	if m := string(b[:4]); m != helloMagic && m != pushMagic || b[4] != helloVersion {
		return false, errors.New("subscribe request: not a psgraph replica's (or another version)")
	}
	return string(b[:4]) == pushMagic, nil
}

// WriteAck tells a pusher that its delta is held.
func WriteAck(w io.Writer) error {
	_, err := w.Write([]byte{ackByte})
	return err
}

// ReadAck reads the answer to a pushed delta.
func ReadAck(r io.Reader) error {
	var b [1]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return err
	}
	if b[0] != ackByte {
		return fmt.Errorf("an answer %d to a pushed state, not an ack", b[0])
	}
	return nil
}

// Rows are rows of a model variable: First + i*Stride, or IDs, or a
// dynamic table's Keys with their Meta.
type Rows struct {
	Name          string
	First, Stride int64
	IDs           []int64
	Keys          []int64
	Meta          []uint64
	Width         int
	Values        []float32
}

// Shard is the state of a pserver's shard of a dynamic table beside its
// rows: which shard it is and its eviction watermark.
type Shard struct {
	Name          string
	Shard, Shards int
	Watermark     int64
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
	if len(r.Name) == 0 || len(r.Name) > 255 || r.Width <= 0 || len(r.Values)%r.Width != 0 ||
		r.Keys != nil && (len(r.Keys) != r.Count() || len(r.Meta) != len(r.Keys)) {
		return fmt.Errorf("rows of %q: a name of 1 to 255 bytes and whole rows (keys with their meta)", r.Name)
	}
	per := max(1, MaxRowsBytes/(4*r.Width))
	for n := r.Count(); n > 0; {
		k := min(n, per)
		part := Rows{Name: r.Name, First: r.First, Stride: r.Stride, Width: r.Width, Values: r.Values[:k*r.Width]}
		switch {
		case r.IDs != nil:
			part.IDs = r.IDs[:k]
			r.IDs = r.IDs[k:]
		case r.Keys != nil:
			part.Keys, part.Meta = r.Keys[:k], r.Meta[:k]
			r.Keys, r.Meta = r.Keys[k:], r.Meta[k:]
		default:
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
	switch {
	case r.IDs != nil:
		b = append(b, byIDs)
		for _, id := range r.IDs {
			b = binary.LittleEndian.AppendUint64(b, uint64(id))
		}
	case r.Keys != nil:
		b = append(b, byKeys)
		for _, k := range r.Keys {
			b = binary.LittleEndian.AppendUint64(b, uint64(k))
		}
		for _, m := range r.Meta {
			b = binary.LittleEndian.AppendUint64(b, m)
		}
	default:
		b = append(b, byRange)
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

// Shard writes the state of a dynamic table's shard.
func (w *Writer) Shard(s Shard) error {
	if len(s.Name) == 0 || len(s.Name) > 255 || s.Shard < 0 || s.Shard >= s.Shards || s.Shards > 1<<16 {
		return fmt.Errorf("shard %d of %d of %q: a name of 1 to 255 bytes and a shard of at most 65536", s.Shard, s.Shards, s.Name)
	}
	b := []byte{kindShard, byte(len(s.Name))}
	b = append(b, s.Name...)
	b = binary.LittleEndian.AppendUint32(b, uint32(s.Shard))
	b = binary.LittleEndian.AppendUint32(b, uint32(s.Shards))
	b = binary.LittleEndian.AppendUint64(b, uint64(s.Watermark))
	_, err := w.w.Write(b)
	return err
}

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

// Frame is one frame read: a Begin (Step, Full), Rows, a Shard, End or
// Finished.
type Frame struct {
	Kind  byte
	Step  int64
	Full  bool
	Rows  Rows
	Shard Shard
}

// words reads n little-endian 64-bit words (into a buffer of the pool,
// Recycle).
func (r *Reader) words(n int) ([]int64, error) {
	out := words.get(n)
	if littleEndian && n > 0 { // read straight into the words
		_, err := io.ReadFull(r.r, unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 8*n))
		return out, err
	}
	b := make([]byte, 8*n)
	if _, err := io.ReadFull(r.r, b); err != nil {
		return nil, err
	}
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out, nil
}

// The buffers Next reads rows into come from these pools and go back to
// them with Recycle, so a replica reading deltas all day allocates (and
// its collector frees) nothing per delta once warm.
var (
	values pool[float32]
	words  pool[int64]
)

// pool holds buffers by size class: class c holds buffers of at least
// 2^c elements.
type pool[T any] struct{ classes [40]sync.Pool }

// get is a buffer of n elements (their values left as they were).
func (p *pool[T]) get(n int) []T {
	c := bits.Len(uint(max(n, 1) - 1)) // 2^c >= n
	if c < len(p.classes) {
		if b, ok := p.classes[c].Get().(*[]T); ok {
			return (*b)[:n]
		}
	}
	return make([]T, n, 1<<min(c, 62))
}

// put gives b back to the pool.
func (p *pool[T]) put(b []T) {
	if cap(b) == 0 {
		return
	}
	c := bits.Len(uint(cap(b))) - 1 // 2^c <= cap
	if c < len(p.classes) {
		b = b[:0]
		p.classes[c].Put(&b)
	}
}

// Recycle gives the buffers of rows read by a Reader back for the frames
// read next; the caller must hold no slice of them after.
func Recycle(r Rows) {
	values.put(r.Values)
	words.put(r.IDs)
	words.put(r.Keys)
	if r.Meta != nil {
		words.put(unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(r.Meta))), cap(r.Meta)))
	}
}

// Frame kinds, as read.
const (
	FrameBegin    = kindBegin
	FrameRows     = kindRows
	FrameEnd      = kindEnd
	FrameFinished = kindFinished
	FrameShard    = kindShard
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
	case kindShard:
		n, err := r.r.ReadByte()
		if err != nil {
			return Frame{}, err
		}
		b := make([]byte, int(n)+16)
		if _, err := io.ReadFull(r.r, b); err != nil {
			return Frame{}, err
		}
		h := b[n:]
		s := Shard{Name: string(b[:n]), Shard: int(binary.LittleEndian.Uint32(h)), Shards: int(binary.LittleEndian.Uint32(h[4:])),
			Watermark: int64(binary.LittleEndian.Uint64(h[8:]))}
		if n == 0 || s.Shards > 1<<16 || s.Shard >= s.Shards {
			return Frame{}, fmt.Errorf("a shard frame of %q: shard %d of %d", s.Name, s.Shard, s.Shards)
		}
		return Frame{Kind: k, Shard: s}, nil
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
		switch h[24] {
		case byRange:
		case byIDs:
			if rw.IDs, err = r.words(count); err != nil {
				return Frame{}, err
			}
		case byKeys:
			if rw.Keys, err = r.words(count); err != nil {
				return Frame{}, err
			}
			meta, err := r.words(count)
			if err != nil {
				return Frame{}, err
			}
			rw.Meta = unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(meta))), cap(meta))[:len(meta)] // the same bits
		default:
			return Frame{}, fmt.Errorf("a rows frame of %q by %d, which no psgraph pserver writes", rw.Name, h[24])
		}
		rw.Values = values.get(count * width)
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
