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
