package dyntable

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"unsafe"
)

// safetensors (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length, a JSON header mapping each tensor name to
// {dtype, shape, data_offsets} (offsets relative to the data, which
// follows the header) plus "__metadata__" (string to string), then the
// raw little-endian data of each tensor, contiguous. psgraph pads the
// header with spaces to a multiple of 8 bytes, as exec/modelfile does.
// These helpers write a file whose tensors are filled piece by piece at
// their offsets (an io.WriterAt, such as an *os.File), so a table is
// written without ever being whole in memory.

type stEntry struct {
	DType   string   `json:"dtype"`
	Shape   []int64  `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

type stTensor struct {
	name  string
	dtype string
	shape []int64
}

func dtypeSize(dt string) int64 {
	switch dt {
	case "I64", "U64", "F64":
		return 8
	case "F32", "I32", "U32":
		return 4
	case "U8", "I8":
		return 1
	}
	return 0
}

func (t stTensor) bytes() int64 {
	n := dtypeSize(t.dtype)
	for _, d := range t.shape {
		n *= d
	}
	return n
}

// stLayout is a file's header and where each tensor's data starts.
type stLayout struct {
	header []byte
	start  map[string]int64 // absolute offset of each tensor's data
	size   int64
}

func layoutSafetensors(tensors []stTensor, meta map[string]string) (stLayout, error) {
	h := map[string]any{"__metadata__": meta}
	var off int64
	rel := map[string]int64{}
	for _, t := range tensors {
		n := t.bytes()
		h[t.name] = stEntry{DType: t.dtype, Shape: t.shape, Offsets: [2]int64{off, off + n}}
		rel[t.name] = off
		off += n
	}
	hj, err := json.Marshal(h)
	if err != nil {
		return stLayout{}, err
	}
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	l := stLayout{header: make([]byte, 8+len(hj)), start: map[string]int64{}}
	binary.LittleEndian.PutUint64(l.header, uint64(len(hj)))
	copy(l.header[8:], hj)
	for name, o := range rel {
		l.start[name] = int64(len(l.header)) + o
	}
	l.size = int64(len(l.header)) + off
	return l, nil
}

// stFile is a safetensors file opened for reading.
type stFile struct {
	r       io.ReaderAt
	entries map[string]stEntry
	meta    map[string]string
	data    int64 // offset of the data
	what    string
}

// maxHeader bounds a header's length (as exec/modelfile's reader does).
const maxHeader = 100 << 20

func openSafetensors(r io.ReaderAt, size int64, what string) (*stFile, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s is not a valid safetensors file: %s", what, fmt.Sprintf(format, args...))
	}
	var n8 [8]byte
	if size < 8 {
		return nil, bad("shorter than its 8-byte header length")
	}
	if _, err := r.ReadAt(n8[:], 0); err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", what, err)
	}
	hl := binary.LittleEndian.Uint64(n8[:])
	if hl > uint64(size-8) || hl > maxHeader {
		return nil, bad("header length %d exceeds the file", hl)
	}
	hj := make([]byte, hl)
	if _, err := r.ReadAt(hj, 8); err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", what, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hj, &raw); err != nil {
		return nil, bad("header: %v", err)
	}
	f := &stFile{r: r, entries: map[string]stEntry{}, data: 8 + int64(hl), what: what}
	body := size - f.data
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &f.meta); err != nil {
				return nil, bad("metadata: %v", err)
			}
			continue
		}
		var e stEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, bad("entry %q: %v", name, err)
		}
		n := dtypeSize(e.DType)
		for _, d := range e.Shape {
			if d < 0 || (d > 0 && n > math.MaxInt64/d) {
				return nil, bad("tensor %q has shape %v", name, e.Shape)
			}
			n *= d
		}
		if e.Offsets[0] < 0 || e.Offsets[1] > body || e.Offsets[1]-e.Offsets[0] != n {
			return nil, bad("tensor %q: data offsets %v do not match %s%v in a body of %d bytes", name, e.Offsets, e.DType, e.Shape, body)
		}
		f.entries[name] = e
	}
	return f, nil
}

// tensor returns the entry of name, which must have dtype dt and, for
// each dimension given as >= 0, that size.
func (f *stFile) tensor(name, dt string, shape ...int64) (stEntry, error) {
	e, ok := f.entries[name]
	if !ok {
		return e, fmt.Errorf("%s has no tensor %q (tensors: %v)", f.what, name, f.names())
	}
	if e.DType != dt || len(e.Shape) != len(shape) {
		return e, fmt.Errorf("%s: tensor %q is %s%v, want %s of %d dimensions", f.what, name, e.DType, e.Shape, dt, len(shape))
	}
	for i, d := range shape {
		if d >= 0 && e.Shape[i] != d {
			return e, fmt.Errorf("%s: tensor %q is %s%v, want dimension %d of size %d", f.what, name, e.DType, e.Shape, i, d)
		}
	}
	return e, nil
}

func (f *stFile) names() []string {
	var out []string
	for n := range f.entries {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// read fills dst with bytes [off, off+len(dst)) of tensor e's data.
func (f *stFile) read(e stEntry, off int64, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	if _, err := f.r.ReadAt(dst, f.data+e.Offsets[0]+off); err != nil {
		return fmt.Errorf("cannot read %s: %w", f.what, err)
	}
	return nil
}

// Byte views of typed slices, without copying (little-endian hosts, as
// psgraph's wire and files assume).

func bytesOf[T int64 | uint64 | float32 | int32](x []T) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*int(unsafe.Sizeof(x[0])))
}

func sortStrings(s []string) { sort.Strings(s) }
