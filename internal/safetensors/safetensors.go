package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// MaxHeader bounds a header's length: a file claiming more is refused
// before anything is allocated for it.
const MaxHeader = 100 << 20

// metaKey is the header's reserved name for the string metadata.
const metaKey = "__metadata__"

// sizes are the bytes of one element of each dtype the format names.
var sizes = map[string]int64{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8,
}

// Size is the bytes of one element of dtype, 0 for a name the format
// does not define.
func Size(dtype string) int64 { return sizes[dtype] }

// Tensor is what the header says of one tensor: its name, dtype and
// shape.
type Tensor struct {
	Name  string
	DType string
	Shape []int64
}

// Bytes is the tensor's data length, or an error when a dimension is
// negative, the dtype unknown or the product overflows int64.
func (t Tensor) Bytes() (int64, error) {
	n := Size(t.DType)
	if n == 0 {
		return 0, fmt.Errorf("tensor %q has dtype %q, which safetensors does not define", t.Name, t.DType)
	}
	for _, d := range t.Shape {
		if d < 0 || (d > 0 && n > math.MaxInt64/d) {
			return 0, fmt.Errorf("tensor %q has shape %v, which no file can hold", t.Name, t.Shape)
		}
		n *= d
	}
	return n, nil
}

// Entry is a tensor of a file and where its data lies: bytes [Begin, End)
// of the data that follows the header.
type Entry struct {
	Tensor
	Begin, End int64
}

// Layout is the header of a file being written and where each tensor's
// data goes: Header is the 8-byte length and the JSON header (padded
// with spaces to a multiple of 8 bytes), At[i] the absolute offset of the
// i-th tensor's data, Size the whole file's length.
type Layout struct {
	Header []byte
	At     []int64
	Size   int64
}

// jsonEntry is an entry as the header spells it.
type jsonEntry struct {
	DType   string   `json:"dtype"`
	Shape   []int64  `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// Encode lays the tensors out one after the other, in the order given,
// and writes the header that says so (its JSON keys sorted, the metadata
// under "__metadata__" when there is any).
func Encode(tensors []Tensor, meta map[string]string) (Layout, error) {
	h := make(map[string]any, len(tensors)+1)
	if len(meta) > 0 {
		h[metaKey] = meta
	}
	rel := make([]int64, len(tensors))
	var off int64
	for i, t := range tensors {
		if t.Name == metaKey {
			return Layout{}, fmt.Errorf("a tensor cannot be named %q", metaKey)
		}
		if _, dup := h[t.Name]; dup {
			return Layout{}, fmt.Errorf("two tensors named %q", t.Name)
		}
		n, err := t.Bytes()
		if err != nil {
			return Layout{}, err
		}
		if n > math.MaxInt64-MaxHeader-8-off {
			return Layout{}, fmt.Errorf("tensor %q ends past the largest file", t.Name)
		}
		h[t.Name] = jsonEntry{DType: t.DType, Shape: slices.Clone(t.Shape), Offsets: [2]int64{off, off + n}}
		rel[i] = off
		off += n
	}
	hj, err := json.Marshal(h)
	if err != nil {
		return Layout{}, err
	}
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	if len(hj) > MaxHeader {
		return Layout{}, fmt.Errorf("a header of %d bytes exceeds the limit of %d", len(hj), MaxHeader)
	}
	l := Layout{Header: make([]byte, 8+len(hj)), At: rel}
	binary.LittleEndian.PutUint64(l.Header, uint64(len(hj)))
	copy(l.Header[8:], hj)
	for i := range l.At {
		l.At[i] += int64(len(l.Header))
	}
	l.Size = int64(len(l.Header)) + off
	return l, nil
}

// File is a safetensors file opened for reading: its header, checked.
type File struct {
	r       io.ReaderAt
	what    string
	data    int64 // where the data starts
	entries map[string]Entry
	// Meta is the header's "__metadata__" (nil when it has none).
	Meta map[string]string
}

// Decode reads and checks the header of a file of size bytes read
// through r; what names the file in errors. It refuses, before anything
// is read of the data: a header longer than the file or than MaxHeader,
// a header that is not one JSON object, a name given twice, metadata that
// is not strings, an unknown dtype, a negative dimension, a shape whose
// byte length overflows, data offsets that do not hold the shape's bytes
// exactly or lie outside the data, and tensors that overlap or leave
// bytes of the data to no tensor (the data is the tensors, back to back,
// in some order).
func Decode(r io.ReaderAt, size int64, what string) (*File, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s is not a valid safetensors file: %s", what, fmt.Sprintf(format, args...))
	}
	if size < 8 {
		return nil, bad("shorter than its 8-byte header length")
	}
	var n8 [8]byte
	if err := readFull(r, n8[:], 0); err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", what, err)
	}
	hl := binary.LittleEndian.Uint64(n8[:])
	if hl > uint64(size-8) {
		return nil, bad("header length %d exceeds the file", hl)
	}
	if hl > MaxHeader {
		return nil, bad("header length %d exceeds the limit of %d", hl, MaxHeader)
	}
	hj := make([]byte, hl)
	if err := readFull(r, hj, 8); err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", what, err)
	}
	raw, err := members(hj)
	if err != nil {
		return nil, bad("header: %v", err)
	}
	f := &File{r: r, what: what, data: 8 + int64(hl), entries: make(map[string]Entry, len(raw))}
	body := size - f.data
	for _, m := range raw {
		if m.name == metaKey {
			if err := json.Unmarshal(m.value, &f.Meta); err != nil {
				return nil, bad("metadata: %v", err)
			}
			continue
		}
		e, err := decodeEntry(m.name, m.value, body)
		if err != nil {
			return nil, bad("%v", err)
		}
		f.entries[m.name] = e
	}
	if err := contiguous(f.entries, body); err != nil {
		return nil, bad("%v", err)
	}
	return f, nil
}

// member is one name and value of the header's object.
type member struct {
	name  string
	value json.RawMessage
}

// members splits a header into its object's members, in order, refusing
// anything but one object (spaces after it aside) and a name given twice
// (encoding/json would keep the last one silently).
func members(hj []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(hj))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil {
		return nil, err
	} else if tok != json.Delim('{') {
		return nil, fmt.Errorf("a JSON object expected, found %v", tok)
	}
	var out []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("a name expected, found %v", tok)
		}
		if seen[name] {
			return nil, fmt.Errorf("%q is named twice", name)
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%q: %v", name, err)
		}
		out = append(out, member{name, v})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if rest := strings.TrimRight(string(hj[dec.InputOffset():]), " \t\r\n"); rest != "" {
		return nil, fmt.Errorf("%d bytes after the header's object", len(rest))
	}
	return out, nil
}

// decodeEntry reads one tensor's entry and checks it against a data of
// body bytes.
func decodeEntry(name string, msg json.RawMessage, body int64) (Entry, error) {
	var je struct {
		DType   *string  `json:"dtype"`
		Shape   *[]int64 `json:"shape"`
		Offsets *[]int64 `json:"data_offsets"`
	}
	if err := json.Unmarshal(msg, &je); err != nil {
		return Entry{}, fmt.Errorf("entry %q: %v", name, err)
	}
	if je.DType == nil || je.Shape == nil || je.Offsets == nil {
		return Entry{}, fmt.Errorf("entry %q lacks its dtype, shape or data_offsets", name)
	}
	e := Entry{Tensor: Tensor{Name: name, DType: *je.DType, Shape: *je.Shape}}
	n, err := e.Bytes()
	if err != nil {
		return Entry{}, err
	}
	off := *je.Offsets
	if len(off) != 2 {
		return Entry{}, fmt.Errorf("tensor %q has data offsets %v, not [begin, end]", name, off)
	}
	e.Begin, e.End = off[0], off[1]
	// End < Begin first: End-Begin may wrap around to n otherwise.
	if e.Begin < 0 || e.End < e.Begin || e.End > body || e.End-e.Begin != n {
		return Entry{}, fmt.Errorf("tensor %q: data offsets %v do not match shape %v of %s (%d bytes) in a data of %d bytes", name, off, e.Shape, e.DType, n, body)
	}
	return e, nil
}

// contiguous checks that the entries tile the data: no two overlap and
// every byte belongs to one.
func contiguous(entries map[string]Entry, body int64) error {
	order := make([]Entry, 0, len(entries))
	for _, e := range entries {
		order = append(order, e)
	}
	slices.SortFunc(order, func(a, b Entry) int {
		if a.Begin != b.Begin {
			return cmp.Compare(a.Begin, b.Begin)
		}
		if a.End != b.End {
			return cmp.Compare(a.End, b.End)
		}
		return strings.Compare(a.Name, b.Name)
	})
	var at int64
	prev := ""
	for _, e := range order {
		switch {
		case e.Begin < at:
			return fmt.Errorf("tensor %q (bytes %d to %d) overlaps tensor %q (ending at %d)", e.Name, e.Begin, e.End, prev, at)
		case e.Begin > at:
			return fmt.Errorf("bytes %d to %d of the data belong to no tensor (before %q)", at, e.Begin, e.Name)
		}
		at, prev = e.End, e.Name
	}
	if at != body {
		return fmt.Errorf("bytes %d to %d of the data belong to no tensor (after the last)", at, body)
	}
	return nil
}

// What is the name the file was opened with.
func (f *File) What() string { return f.what }

// Names lists the file's tensors, sorted.
func (f *File) Names() []string {
	out := make([]string, 0, len(f.entries))
	for n := range f.entries {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Entry returns the entry of name.
func (f *File) Entry(name string) (Entry, bool) {
	e, ok := f.entries[name]
	return e, ok
}

// Want returns the entry of name, which must have dtype and as many
// dimensions as dims, each of the size given where that is >= 0.
func (f *File) Want(name, dtype string, dims ...int64) (Entry, error) {
	e, ok := f.entries[name]
	if !ok {
		return e, fmt.Errorf("%s has no tensor %q (tensors: %v)", f.what, name, f.Names())
	}
	if e.DType != dtype || len(e.Shape) != len(dims) {
		return e, fmt.Errorf("%s: tensor %q is %s%v, want %s of %d dimensions", f.what, name, e.DType, e.Shape, dtype, len(dims))
	}
	for i, d := range dims {
		if d >= 0 && e.Shape[i] != d {
			return e, fmt.Errorf("%s: tensor %q is %s%v, want dimension %d of size %d", f.what, name, e.DType, e.Shape, i, d)
		}
	}
	return e, nil
}

// Read fills dst with bytes [off, off+len(dst)) of e's data; a range
// outside the tensor is an error, not a read of its neighbour's bytes.
func (f *File) Read(e Entry, off int64, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	if n := e.End - e.Begin; off < 0 || off > n || int64(len(dst)) > n-off {
		return fmt.Errorf("%s: bytes %d to %d of tensor %q, which holds %d", f.what, off, off+int64(len(dst)), e.Name, n)
	}
	if err := readFull(f.r, dst, f.data+e.Begin+off); err != nil {
		return fmt.Errorf("cannot read %s: tensor %q: %w", f.what, e.Name, err)
	}
	return nil
}

// readFull reads len(dst) bytes at off; io.EOF with every byte read is
// success (an io.ReaderAt may say so at the end of its data).
func readFull(r io.ReaderAt, dst []byte, off int64) error {
	n, err := r.ReadAt(dst, off)
	if n == len(dst) && (err == nil || errors.Is(err, io.EOF)) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}
