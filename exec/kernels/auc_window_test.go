package kernels

import (
	"math/rand/v2"
	"testing"

	"github.com/psgraph/psgraph/exec/tensor"
)

// The window's AUC is that of its last rows, computed over them at once
// (AUCRows), however the batches fall against the window's size.
func TestAUCWindowIsTheLastRows(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const size = 50
	w := NewAUCWindow(size)
	var scores []float32
	var labels []int32
	for step := range 40 {
		n := 1 + r.IntN(17)
		s, l := tensor.New(tensor.F32, tensor.Shape{n, 2}), tensor.New(tensor.I32, tensor.Shape{n})
		for i := range n {
			l.I[i] = int32(r.IntN(2))
			s.F[2*i], s.F[2*i+1] = float32(r.NormFloat64()), float32(r.NormFloat64())+0.7*float32(l.I[i])
			scores = append(scores, s.F[2*i], s.F[2*i+1])
			labels = append(labels, l.I[i])
		}
		if err := w.Add(s, l, n); err != nil {
			t.Fatal(err)
		}
		k := min(size, len(labels))
		ref := AUCRows{}
		rs, rl := tensor.New(tensor.F32, tensor.Shape{k, 2}), tensor.New(tensor.I32, tensor.Shape{k})
		copy(rs.F, scores[2*(len(labels)-k):])
		copy(rl.I, labels[len(labels)-k:])
		if err := ref.Add(rs, rl, k); err != nil {
			t.Fatal(err)
		}
		if got, want := w.AUC(), ref.AUC(); got != want && !(got != got && want != want) || w.Rows() != k {
			t.Fatalf("step %d: window AUC %v over %d rows, want %v over the last %d", step, got, w.Rows(), want, k)
		}
	}
}

// A window taken back from its State is the same window: the same AUC
// now and after the same rows are added to both; a state of another size
// or with a label not 0 or 1 is refused.
func TestAUCWindowStateRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const size = 37
	add := func(ws ...*AUCWindow) {
		n := 1 + r.IntN(9)
		s, l := tensor.New(tensor.F32, tensor.Shape{n, 2}), tensor.New(tensor.I32, tensor.Shape{n})
		for i := range n {
			l.I[i] = int32(r.IntN(2))
			s.F[2*i], s.F[2*i+1] = float32(r.NormFloat64()), float32(r.NormFloat64())+0.5*float32(l.I[i])
		}
		for _, w := range ws {
			if err := w.Add(s, l, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, before := range []int{0, 3, 30} { // empty, partly full, wrapped
		w := NewAUCWindow(size)
		for range before {
			add(w)
		}
		st := make([]float32, 2*size)
		next, full := w.State(st)
		back := NewAUCWindow(size)
		if err := back.SetState(st, next, full); err != nil {
			t.Fatal(err)
		}
		for step := range 10 {
			a, b := w.AUC(), back.AUC()
			if a != b && !(a != a && b != b) || w.Rows() != back.Rows() {
				t.Fatalf("%d batches in, step %d: AUC %v over %d rows, taken back %v over %d", before, step, a, w.Rows(), b, back.Rows())
			}
			add(w, back)
		}
	}
	w := NewAUCWindow(size)
	if err := w.SetState(make([]float32, 2*size+2), 0, false); err == nil {
		t.Error("a state of another size was taken")
	}
	bad := make([]float32, 2*size)
	bad[1] = 0.5
	if err := w.SetState(bad, 0, false); err == nil {
		t.Error("a state with the label 0.5 was taken")
	}
}
