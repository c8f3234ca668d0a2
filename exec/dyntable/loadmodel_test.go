package dyntable

// LoadModel, a reader of the model layout that its tests use to read
// back what Export wrote; evaluation and prediction read a model file's
// tables with program.ReadTable.

import (
	"fmt"
	"io"

	"github.com/psgraph/psgraph/internal/safetensors"
)

// LoadModel reads the table name of a file written by WriteSafetensors
// (any layout) as a lookup-only table for evaluation and prediction:
// Read gives a key's value, or def (nil: zeros) for a key the file does
// not hold.
func LoadModel(r io.ReaderAt, size int64, name string, def []float32) (*Table, error) {
	f, err := safetensors.Decode(r, size, "model file")
	if err != nil {
		return nil, err
	}
	keys, err := f.Want(KeysName(name), "I64", -1)
	if err != nil {
		return nil, err
	}
	n := keys.Shape[0]
	vals, err := f.Want(name, "F32", n, -1)
	if err != nil {
		return nil, err
	}
	d := vals.Shape[1]
	t, err := New(Config{Dim: int(d), Default: def})
	if err != nil {
		return nil, fmt.Errorf("model file: table %s: %w", name, err)
	}
	bk := make([]int64, min(n, cutBatch))
	bv := make([]float32, len(bk)*int(d))
	for at := int64(0); at < n; at += int64(len(bk)) {
		k := min(int64(len(bk)), n-at)
		if err := f.Read(keys, at*8, bytesOf(bk[:k])); err != nil {
			return nil, err
		}
		if err := f.Read(vals, at*4*d, bytesOf(bv[:k*d])); err != nil {
			return nil, err
		}
		for i := range k {
			if slot := t.find(bk[i]); slot >= 0 {
				return nil, fmt.Errorf("model file: table %s holds key %d twice", name, bk[i])
			}
			if err := t.applyRow(bk[i], stepMeta(0, 1), bv[i*d:(i+1)*d], nil); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

func (t *Table) find(key int64) int32 {
	_, _, slot, found := t.idx.find(&t.rows, key, uint32(indexHash(key)>>32))
	if !found || t.deadAt(slot) {
		return NoRow
	}
	return slot
}
