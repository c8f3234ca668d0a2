package dyntable_test

import (
	"math"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
)

// A dynamic table initializes key r as exec/program initializes row r of
// a fixed table with the same initializer and seed, bit for bit, whatever
// the order the keys arrive in and however they are spread over shards:
// the same model starts the same with either kind of table.
func TestInitMatchesFixedTable(t *testing.T) {
	const rows, dim = 300, 6
	for _, c := range []struct {
		init  *dsl.Init
		dyn   dyntable.Init
		state []float32
	}{
		{&dsl.Init{Type: "normal", Attrs: ops.Attrs{"mean": 0.5, "std": 0.1, "seed": 42}}, dyntable.Init{Kind: dyntable.Normal, Mean: 0.5, Std: 0.1}, nil},
		{&dsl.Init{Type: "uniform", Attrs: ops.Attrs{"min": -0.05, "max": 0.05, "seed": 42}}, dyntable.Init{Kind: dyntable.Uniform, Min: -0.05, Max: 0.05}, []float32{0.1, 0.1}},
		{&dsl.Init{Type: "constant", Attrs: ops.Attrs{"value": 0.25, "seed": 42}}, dyntable.Init{Kind: dyntable.Constant, Value: 0.25}, nil},
	} {
		fixed := tensor.New(tensor.F32, tensor.Shape{rows, dim})
		if err := program.Initialize(fixed, c.init, "emb", nil, 0, 1, nil); err != nil {
			t.Fatal(err)
		}
		// Keys arrive backwards, over 3 shards.
		const shards = 3
		tabs := make([]*dyntable.Table, shards)
		for s := range tabs {
			var err error
			tabs[s], err = dyntable.New(dyntable.Config{Dim: dim, StateWidth: len(c.state), StateInit: c.state, Seed: 42, Init: c.dyn})
			if err != nil {
				t.Fatal(err)
			}
		}
		for r := rows - 1; r >= 0; r-- {
			tab := tabs[dyntable.ShardOf(int64(r), shards)]
			got := make([]float32, dim+len(c.state))
			slot := []int32{0}
			if err := tab.Lookup([]int64{int64(r)}, nil, slot); err != nil {
				t.Fatal(err)
			}
			if err := tab.Gather(slot, 0, dim+len(c.state), got); err != nil {
				t.Fatal(err)
			}
			for j := range dim {
				if want := fixed.F[r*dim+j]; math.Float32bits(got[j]) != math.Float32bits(want) {
					t.Fatalf("%s: key %d column %d is %v; the fixed table's row has %v", c.init.Type, r, j, got[j], want)
				}
			}
			for j, v := range c.state {
				if got[dim+j] != v {
					t.Fatalf("%s: key %d state %d is %v, want %v", c.init.Type, r, j, got[dim+j], v)
				}
			}
		}
		for s, tab := range tabs {
			if n := tab.Stats().Live; n < rows/shards/2 {
				t.Errorf("shard %d holds %d of %d keys: ShardOf does not spread them", s, n, rows)
			}
		}
	}
}
