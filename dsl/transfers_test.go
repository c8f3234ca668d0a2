package dsl_test

import (
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/partition"
)

// The transfer table of a placed job lists, for every node, each transfer
// once per peer, and the two ends of every transfer agree: what one node
// sends its peer, that peer receives from it (or from every trainer), with
// the same name, kind, element type and size.
func TestTransfersOfAPlacedJobMatchEnds(t *testing.T) {
	for _, c := range []struct {
		path     string
		trainers int
		pservers int
		clip     bool
	}{
		{"../examples/digits-mlp.yaml", 2, 2, false},
		{"../partition/testdata/split/tables-2x3/model.yaml", 2, 3, false},
		{"../testdata/optim/mlp-adam-clip-norm.yaml", 2, 2, true},
	} {
		g, err := dsl.Load(c.path)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := partition.Split(g, partition.Options{Trainers: c.trainers, PServers: c.pservers, MinBlockSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := plan.Trainer.Transfers(g.Batch(), nil)
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[dsl.TransferKind]int{}
		for _, x := range tr {
			kinds[x.Kind]++
			if x.Peer.Role != ir.PServerRole || x.Peer.Index >= c.pservers {
				t.Fatalf("%s: trainer's %s %s talks to %v", c.path, x.Kind, x.Var, x.Peer)
			}
			ps, err := plan.PServers[x.Peer.Index].Transfers(g.Batch(), nil)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, y := range ps {
				if y.Var == x.Var && y.Recv != x.Recv && y.Kind == x.Kind {
					found = true
					if y.DType != x.DType || y.Bytes != x.Bytes || y.AtMost != x.AtMost {
						t.Errorf("%s: %s: the trainer's end is %s %d bytes (at most: %v), %v's is %s %d (%v)", c.path, x.Var, x.DType, x.Bytes, x.AtMost, x.Peer, y.DType, y.Bytes, y.AtMost)
					}
					if y.Peer.Role != ir.TrainerRole {
						t.Errorf("%s: %v's end of %s names %v", c.path, x.Peer, x.Var, y.Peer)
					}
				}
			}
			if !found {
				t.Errorf("%s: the trainer's %s %s (recv %v) has no end on %v", c.path, x.Kind, x.Var, x.Recv, x.Peer)
			}
		}
		if kinds[dsl.ParamTransfer] == 0 || kinds[dsl.GradTransfer] == 0 {
			t.Errorf("%s: no parameter or gradient transfers: %v", c.path, kinds)
		}
		if c.clip && (kinds[dsl.ClipPartTransfer] != c.pservers || kinds[dsl.ClipFactorTransfer] != c.pservers) {
			t.Errorf("%s: clip exchange %d parts, %d factors, want %d each", c.path, kinds[dsl.ClipPartTransfer], kinds[dsl.ClipFactorTransfer], c.pservers)
		}
		if tables := kinds[dsl.TableIDsTransfer]; tables > 0 && (tables%c.pservers != 0 || kinds[dsl.TableRowsTransfer] != tables || kinds[dsl.TableGradTransfer] != tables) {
			t.Errorf("%s: a table's transfers per shard: %v", c.path, kinds)
		}
		for _, x := range tr {
			if x.Kind == dsl.GradTransfer && x.Var != ops.GradName(x.Var[:len(x.Var)-len(ops.GradSuffix)]) {
				t.Errorf("%s: gradient transfer %s is not named as a gradient", c.path, x.Var)
			}
		}
	}
}
