package partition

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
)

// The op catalog's transfer property is the transfer table's source: in
// the placed graphs of a dense model with clip.norm, of a model with a
// sharded table and of one with bundled tables, split separately and
// together, the ops dsl.Graph.Transfers lists are exactly the ops the
// catalog marks as transfers, and together they use all 11 of them.
func TestTransferOpsAreTheCatalogs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "d.csv"), []byte("1,3,4\n0,5,6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bundled, err := dsl.LoadBytes(filepath.Join(dir, "b.yaml"), []byte(bundleSource))
	if err != nil {
		t.Fatal(err)
	}
	load := func(path string) *dsl.Graph {
		g, err := dsl.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	used := map[string]bool{}
	for _, c := range []struct {
		g   *dsl.Graph
		opt Options
	}{
		{load("../testdata/restart/digits-clip-norm.yaml"), Options{Trainers: 2, PServers: 2, MinBlockSize: 1}},
		{load("../testdata/sparse/emb-adagrad.yaml"), Options{Trainers: 2, PServers: 2, MinBlockSize: 1}},
		{bundled, Options{Trainers: 2, PServers: 2}},
	} {
		p, err := Split(c.g, c.opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range append([]*dsl.Graph{p.Trainer}, p.PServers...) {
			ts, err := g.Transfers(max(g.Batch(), 1), nil)
			if err != nil {
				t.Fatal(err)
			}
			listed := map[*dsl.Op]bool{}
			for _, tr := range ts {
				listed[tr.Op] = true
			}
			for _, op := range g.Ops {
				def, _ := ops.Lookup(op.Type)
				if listed[op] != def.Transfer {
					t.Errorf("%s of %s: in the transfer table %v, a transfer op in the catalog %v", op.Type, g.Name, listed[op], def.Transfer)
				}
				if def.Transfer {
					used[op.Type] = true
				}
			}
		}
	}
	if len(used) != 11 {
		t.Errorf("the placed graphs use the transfer ops %v, want all 11", used)
	}
}
