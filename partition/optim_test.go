package partition

import (
	"strings"
	"testing"
)

// Row-wise adagrad keeps one value per row: a table's [V, 1] accumulator
// is sharded with the table (shard j holds its rows' values, as a strided
// block of the whole), while a dense matrix with such state is not cut
// into row blocks and plan.yaml says why.
func TestSplitShardsPerRowStateWithItsTable(t *testing.T) {
	g, _ := loadModel(t, "../testdata/sparse/cancel-rowwise_adagrad.yaml")
	p, err := Split(g, Options{Trainers: 2, PServers: 2})
	if err != nil {
		t.Fatal(err)
	}
	for j, ps := range p.PServers {
		name := ShardName("emb", j) + "@sum"
		v := ps.Vars[name]
		if v == nil {
			t.Fatalf("pserver %d holds no %s", j, name)
		}
		if !v.Shape.Equal([]int{25, 1}) || v.Block == nil || v.Block.Of != "emb@sum" || v.Block.Start != j || v.Block.Step() != 2 || !v.Block.Shape.Equal([]int{50, 1}) {
			t.Fatalf("pserver %d: %s is %v with block %+v, want [25, 1], rows %d, %d+2, ... of emb@sum [50, 1]", j, name, v.Shape, v.Block, j, j)
		}
	}

	g, _ = loadModel(t, "../testdata/optim/mlp-rowwise_adagrad.yaml")
	p, err = Split(g, Options{Trainers: 2, PServers: 2, MinBlockSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	for _, pi := range p.Info.Params {
		if pi.Name != "W1" && pi.Name != "W2" {
			continue
		}
		if len(pi.Blocks) != 1 || !strings.Contains(pi.Whole, "state "+pi.Name+"@sum has shape") {
			t.Errorf("%s: %d blocks, whole %q; want it whole because of its [rows, 1] state", pi.Name, len(pi.Blocks), pi.Whole)
		}
	}
}
