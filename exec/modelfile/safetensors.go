package modelfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/internal/atomicfile"
	"github.com/psgraph/psgraph/internal/safetensors"
)

// Files are safetensors (internal/safetensors). psgraph writes and reads
// the dtypes F32 (float32), I32 (int32 ids) and I64 (int64 keys), numpy's
// '<f4', '<i4' and '<i8'.

// stDTypes maps a tensor's dtype to its safetensors name.
var stDTypes = map[tensor.DType]string{tensor.F32: "F32", tensor.I32: "I32", tensor.I64: "I64"}

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
	tensors := make([]safetensors.Tensor, len(entries))
	for i, e := range entries {
		dt, ok := stDTypes[e.DType]
		if !ok {
			return fmt.Errorf("cannot write %s: tensor %q has dtype %v, which safetensors files of psgraph do not hold", path, e.Name, e.DType)
		}
		tensors[i] = safetensors.Tensor{Name: e.Name, DType: dt, Shape: make([]int64, len(e.Shape))}
		for j, d := range e.Shape {
			tensors[i].Shape[j] = int64(d)
		}
	}
	l, err := safetensors.Encode(tensors, meta)
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	err = atomicfile.Write(path, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		if _, err := bw.Write(l.Header); err != nil {
			return err
		}
		for i, e := range entries {
			cw := &countingWriter{w: bw}
			if err := e.Write(cw); err != nil {
				return fmt.Errorf("tensor %q: %w", e.Name, err)
			}
			size, _ := tensors[i].Bytes()
			if cw.n != size {
				return fmt.Errorf("tensor %q: %d bytes written, its shape %v holds %d", e.Name, cw.n, e.Shape, size)
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
	st, err := safetensors.Decode(f, fi.Size(), path)
	if err != nil {
		return nil, nil, err
	}
	out := map[string]*tensor.Tensor{}
	for _, name := range st.Names() {
		e, _ := st.Entry(name)
		dt := tensor.Invalid
		for d, n := range stDTypes {
			if n == e.DType {
				dt = d
			}
		}
		if dt == tensor.Invalid {
			return nil, nil, fmt.Errorf("%s: tensor %q has dtype %s; psgraph reads F32, I32 and I64", path, name, e.DType)
		}
		if want != nil && !want(name) {
			continue
		}
		shape := make(tensor.Shape, len(e.Shape))
		for i, d := range e.Shape {
			shape[i] = int(d)
		}
		t := tensor.New(dt, shape)
		if err := st.Read(e, 0, t.Bytes()); err != nil {
			return nil, nil, err
		}
		out[name] = t
	}
	return out, st.Meta, nil
}
