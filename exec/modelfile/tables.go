package modelfile

import (
	"fmt"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/tensor"
)

// A sharded lookup table never exists whole on one node: each pserver
// holds its shard (rows r with r mod M = its index), and trainers fetch
// rows by id. Saving one therefore takes two steps: every pserver writes
// its shards (ServeOptions.Save), and MergeShards joins them with trainer
// 0's file (the dense parameters) into one model file, the whole table
// under its own name, as a local run would have saved it.

// MergeShards writes into out the tensors of the file base (trainer 0's
// --save: the dense parameters) and, whole, every lookup table whose
// shards the files shards hold (shards[i] written by the pserver of graph
// pservers[i]). out may be base.
func MergeShards(out, base string, pservers []*dsl.Graph, shards []string) error {
	all, meta, err := LoadSafetensors(base)
	if err != nil {
		return err
	}
	filled := map[string]int{}
	for i, path := range shards {
		part, _, err := LoadSafetensors(path)
		if err != nil {
			return err
		}
		for name, t := range part {
			v := pservers[i].Vars[name]
			if v == nil || v.Block == nil {
				return fmt.Errorf("%s: %q is not a table shard of %s", path, name, pservers[i].File)
			}
			b := v.Block
			whole := all[b.Of]
			if whole == nil {
				whole = tensor.New(t.DType, b.Shape)
				all[b.Of] = whole
			}
			if !whole.Shape.Equal(b.Shape) || t.Numel() != b.Rows()*t.RowWidth() {
				return fmt.Errorf("%s: %q is %v, but its block of %s %v holds %d rows", path, name, t.Shape, b.Of, b.Shape, b.Rows())
			}
			w := t.RowWidth()
			for r := range b.Rows() {
				g := b.Start + r*b.Step()
				copy(whole.F[g*w:(g+1)*w], t.F[r*w:(r+1)*w])
			}
			filled[b.Of] += b.Rows()
		}
	}
	for name, n := range filled {
		if rows := all[name].Shape[0]; n != rows {
			return fmt.Errorf("the shards of %s hold %d of its %d rows; pass every pserver's shard file", name, n, rows)
		}
	}
	return SaveSafetensors(out, all, meta)
}
