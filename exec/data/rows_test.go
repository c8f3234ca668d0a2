package data

import (
	"path/filepath"
	"testing"

	"github.com/psgraph/psgraph/dsl"
)

// Rows counts the rows training reads: with data.eval: {fraction} the
// held-out rows are not among them, as LoadSplit leaves them out, so
// train.epochs gives a split job's trainers the steps a local run takes.
func TestRowsLeaveOutTheHeldOutFraction(t *testing.T) {
	g, err := dsl.Load(filepath.Join("..", "..", "testdata", "eval", "digits-heldout.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Data.Eval == nil || g.Data.Eval.Fraction == 0 {
		t.Fatal("testdata/eval/digits-heldout.yaml no longer holds out a fraction")
	}
	sp, err := LoadSplit(g.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := Rows(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	if int(n) != sp.Train.Rows || sp.Eval == nil || sp.Eval.Rows == 0 {
		t.Fatalf("Rows %d, LoadSplit trains on %d rows and holds out %v", n, sp.Train.Rows, sp.Eval)
	}
}
