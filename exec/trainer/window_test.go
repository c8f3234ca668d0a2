package trainer

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
)

// windowGraph is the part of a graph a window reads: loss "loss", metrics
// "acc" (a mean over rows) and "auc", whose op reads one score per row.
func windowGraph() *dsl.Graph {
	return &dsl.Graph{
		Train: &dsl.Train{Loss: "loss", Metrics: []string{"acc", "auc"}},
		Ops: []*dsl.Op{
			{Type: "accuracy", Inputs: []string{"s", "y"}, Outputs: []string{"acc"}},
			{Type: "auc", Inputs: []string{"s", "y"}, Outputs: []string{"auc"}},
		},
	}
}

// pairAUC is the AUC by its definition: the share of (positive, negative)
// pairs in which the positive scores higher, ties counting 1/2.
func pairAUC(s []float32, y []int32) float64 {
	var num, pairs float64
	for i := range s {
		for j := range s {
			if y[i] == 1 && y[j] == 0 {
				pairs++
				if s[i] > s[j] {
					num++
				} else if s[i] == s[j] {
					num += 0.5
				}
			}
		}
	}
	return num / pairs
}

// The progressive validation window of an online run reports the mean of
// the last batches' loss and acc covering its rows and the AUC of exactly
// its last rows, as recomputed here from every batch added; a window
// restored from the tensors a checkpoint keeps reports what the original
// does and goes on doing so as both take more batches. A window that is
// not full averages the batches it has.
func TestWindowIsTheLastBatches(t *testing.T) {
	const size, batch, steps = 20, 8, 11 // 3 batches: 24 rows
	g := windowGraph()
	w := newWindow(g, size, batch)
	if got := len(w.vals); got != 3 {
		t.Fatalf("a window of %d rows in batches of %d holds %d batches, want 3", size, batch, got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var losses, accs []float64
	var scores []float32
	var labels []int32
	scope := func() program.Scope {
		s := program.Scope{
			"loss": tensor.New(tensor.F32, tensor.Shape{}),
			"acc":  tensor.New(tensor.F32, tensor.Shape{}),
			"auc":  tensor.New(tensor.F32, tensor.Shape{}), // the batch's, which the window does not average
			"s":    tensor.New(tensor.F32, tensor.Shape{batch}),
			"y":    tensor.New(tensor.I32, tensor.Shape{batch}),
		}
		s["loss"].F[0], s["acc"].F[0] = rng.Float32()*3, rng.Float32()
		for r := range batch {
			s["s"].F[r] = float32(rng.IntN(5)) // ties too
			s["y"].I[r] = int32(rng.IntN(2))
		}
		losses, accs = append(losses, float64(s["loss"].F[0])), append(accs, float64(s["acc"].F[0]))
		scores, labels = append(scores, s["s"].F...), append(labels, s["y"].I...)
		return s
	}
	check := func(what string, w *window) {
		t.Helper()
		nb := min(len(losses), 3)
		var loss, acc float64
		for i := len(losses) - nb; i < len(losses); i++ {
			loss, acc = loss+losses[i]/float64(nb), acc+accs[i]/float64(nb)
		}
		rows := nb * batch
		auc := pairAUC(scores[len(scores)-rows:], labels[len(labels)-rows:])
		got := w.values()
		if w.rows() != rows || math.Abs(got[0]-loss) > 1e-12 || math.Abs(got[1]-acc) > 1e-12 || math.Abs(got[2]-auc) > 1e-12 {
			t.Errorf("%s after %d batches: %d rows, loss %v acc %v auc %v; want %d rows, %v %v %v", what, len(losses), w.rows(), got[0], got[1], got[2], rows, loss, acc, auc)
		}
	}
	var restored *window
	for step := range steps {
		s := scope()
		if err := w.add(s); err != nil {
			t.Fatal(err)
		}
		check("the window", w)
		if restored != nil {
			if err := restored.add(s); err != nil {
				t.Fatal(err)
			}
			check("the restored window", restored)
		}
		if step == 4 { // full, its ring turned once: restore a copy
			kept := w.keep()
			restored = newWindow(g, size, batch)
			got := map[string]bool{}
			for name, ts := range restored.kept {
				copy(ts.Bytes(), kept[name].Bytes())
				got[name] = true
			}
			if ok, err := restored.restored(got); !ok || err != nil {
				t.Fatalf("restoring the kept window: %v, %v", ok, err)
			}
			check("the restored window", restored)
		}
	}
}

// A checkpoint that holds another window's tensors, or a ring position
// out of range, is not taken: the window stays empty or says what is wrong.
func TestWindowRestoreRefusesOtherWindows(t *testing.T) {
	g := windowGraph()
	w := newWindow(g, 16, 8)
	got := map[string]bool{windowValues: true, windowState: true} // the auc's rows missing
	if ok, err := w.restored(got); ok || err != nil {
		t.Errorf("a checkpoint without the auc rows: restored %v, %v; want false, no error", ok, err)
	}
	got[windowAUC(0)] = true
	w.kept[windowState].L[0] = 2 // of 2 batches
	if ok, err := w.restored(got); ok || err == nil {
		t.Errorf("a ring position past the window: restored %v, %v; want an error", ok, err)
	}
	if w.rows() != 0 || !math.IsNaN(w.values()[0]) {
		t.Errorf("the refused window holds %d rows, loss %v; want empty", w.rows(), w.values()[0])
	}
}
