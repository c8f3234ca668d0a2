package job

import (
	"fmt"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/tensor"
)

// mergeShards writes into out the tensors of the file base (trainer 0's
// --save) and, whole, every lookup table whose shards the files shards
// hold (shards[i] written by the pserver of graph pservers[i], its own
// --save): the tests' reference for the whole model trainer 0 pulls from
// the pservers, built from the shards another way. out may be base.
func mergeShards(out, base string, pservers []*dsl.Graph, shards []string) error {
	all, meta, err := modelfile.LoadSafetensors(base)
	if err != nil {
		return err
	}
	filled := map[string]int{}
	for i, path := range shards {
		part, _, err := modelfile.LoadSafetensors(path)
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
	return modelfile.SaveSafetensors(out, all, meta)
}
