package modelfile

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/internal/atomicfile"
)

// safetensors: an 8-byte little-endian header length, a JSON header mapping
// each name to {dtype, shape, data_offsets}, then the raw little-endian data.
// psgraph writes and reads the dtypes F32 (float32), I32 (int32 ids) and
// I64 (int64 keys), numpy's '<f4', '<i4' and '<i8'.

// stDTypes maps a tensor's dtype to its safetensors name.
var stDTypes = map[tensor.DType]string{tensor.F32: "F32", tensor.I32: "I32", tensor.I64: "I64"}

type stEntry struct {
	DType   string `json:"dtype"`
	Shape   []int  `json:"shape"`
	Offsets [2]int `json:"data_offsets"`
}

// SaveSafetensors writes tensors by name, atomically (temporary file, fsync, rename).
func SaveSafetensors(path string, tensors map[string]*tensor.Tensor, meta map[string]string) error {
	entries := make([]Entry, 0, len(tensors))
	for n, t := range tensors {
		entries = append(entries, Entry{Name: n, DType: t.DType, Shape: t.Shape, Write: func(w io.Writer) error {
			_, err := w.Write(t.Bytes())
			return err
		}})
	}
	return SaveStreamed(path, entries, meta)
}

// Entry is one tensor of a file written by SaveStreamed: its name, dtype
// and shape, and Write, which writes its DType.Size() x numel bytes in
// order (in pieces, so that a tensor larger than memory can come from
// elsewhere: a sharded table pulled from the pservers chunk by chunk).
type Entry struct {
	Name  string
	DType tensor.DType
	Shape []int
	Write func(w io.Writer) error
}

// SaveStreamed writes the entries as a safetensors file, atomically. The
// header is written first, from the entries' shapes; then each entry, in
// name order, writes its data. The bytes are those SaveSafetensors writes
// for the same tensors (it is SaveStreamed of its tensors); a Write that
// writes another number of bytes than its shape holds fails the save.
func SaveStreamed(path string, entries []Entry, meta map[string]string) error {
	entries = slices.Clone(entries)
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	header := map[string]any{}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	off := 0
	sizes := make([]int, len(entries))
	for i, e := range entries {
		dt, ok := stDTypes[e.DType]
		if !ok {
			return fmt.Errorf("cannot write %s: tensor %q has dtype %v, which safetensors files of psgraph do not hold", path, e.Name, e.DType)
		}
		size := e.DType.Size()
		for _, d := range e.Shape {
			size *= d
		}
		sizes[i] = size
		header[e.Name] = stEntry{DType: dt, Shape: append([]int{}, e.Shape...), Offsets: [2]int{off, off + size}}
		off += size
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	err = atomicfile.Write(path, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		var n8 [8]byte
		binary.LittleEndian.PutUint64(n8[:], uint64(len(hj)))
		if _, err := bw.Write(n8[:]); err != nil {
			return err
		}
		if _, err := bw.Write(hj); err != nil {
			return err
		}
		for i, e := range entries {
			cw := &countingWriter{w: bw}
			if err := e.Write(cw); err != nil {
				return fmt.Errorf("tensor %q: %w", e.Name, err)
			}
			if cw.n != int64(sizes[i]) {
				return fmt.Errorf("tensor %q: %d bytes written, its shape %v holds %d", e.Name, cw.n, e.Shape, sizes[i])
			}
		}
		return bw.Flush()
	})
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// LoadSafetensors reads every float32, int32 and int64 tensor of a
// safetensors file.
func LoadSafetensors(path string) (map[string]*tensor.Tensor, map[string]string, error) {
	return LoadSafetensorsOf(path, nil)
}

// SafetensorsMeta reads a safetensors file's metadata: its header only
// (every entry still checked).
func SafetensorsMeta(path string) (map[string]string, error) {
	_, meta, err := LoadSafetensorsOf(path, func(string) bool { return false })
	return meta, err
}

// LoadSafetensorsOf reads the tensors of a safetensors file whose names
// want accepts (nil: all), each straight from the file into its tensor:
// a node that needs a few tensors of a large model file reads those
// bytes only, and holds no copy of the file.
func LoadSafetensorsOf(path string, want func(name string) bool) (map[string]*tensor.Tensor, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	size := fi.Size()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s is not a valid safetensors file: %s", path, fmt.Sprintf(format, args...))
	}
	if size < 8 {
		return nil, nil, bad("shorter than its 8-byte header length")
	}
	var lenBuf [8]byte
	if _, err := f.ReadAt(lenBuf[:], 0); err != nil {
		return nil, nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	hl := binary.LittleEndian.Uint64(lenBuf[:])
	if hl > uint64(size-8) || hl > 100<<20 {
		return nil, nil, bad("header length %d exceeds the file", hl)
	}
	head := make([]byte, hl)
	if _, err := f.ReadAt(head, 8); err != nil {
		return nil, nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(head, &header); err != nil {
		return nil, nil, bad("header: %v", err)
	}
	base, bodyLen := 8+int64(hl), size-8-int64(hl)
	out := map[string]*tensor.Tensor{}
	var meta map[string]string
	for name, msg := range header {
		if name == "__metadata__" {
			_ = json.Unmarshal(msg, &meta)
			continue
		}
		var e stEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, nil, bad("entry %q: %v", name, err)
		}
		dt := tensor.Invalid
		for d, n := range stDTypes {
			if n == e.DType {
				dt = d
			}
		}
		if dt == tensor.Invalid {
			return nil, nil, bad("tensor %q has dtype %s; psgraph reads F32, I32 and I64", name, e.DType)
		}
		n := int64(dt.Size())
		for _, d := range e.Shape {
			if d < 0 || int64(d) > bodyLen {
				return nil, nil, bad("tensor %q has shape %v", name, e.Shape)
			}
			n *= int64(d)
			if n > bodyLen {
				break
			}
		}
		if e.Offsets[0] < 0 || e.Offsets[1] < e.Offsets[0] || int64(e.Offsets[1]) > bodyLen || int64(e.Offsets[1])-int64(e.Offsets[0]) != n {
			return nil, nil, bad("tensor %q: data offsets %v do not match shape %v", name, e.Offsets, e.Shape)
		}
		if want != nil && !want(name) {
			continue
		}
		t := tensor.New(dt, e.Shape)
		if _, err := f.ReadAt(t.Bytes(), base+int64(e.Offsets[0])); err != nil && !(err == io.EOF && n == 0) {
			return nil, nil, fmt.Errorf("cannot read %s: tensor %q: %w", path, name, err)
		}
		out[name] = t
	}
	return out, meta, nil
}
