package kernels

import (
	"math/rand/v2"
	"testing"

	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/tensor"
)

func randTensor(r *rand.Rand, shape ...int) *tensor.Tensor {
	t := tensor.New(tensor.F32, tensor.Shape(shape))
	for i := range t.F {
		t.F[i] = r.Float32()*2 - 1
	}
	return t
}

// BenchmarkDotInteraction is DLRM's interaction in the canonical Criteo
// shape (batch 128, the bottom MLP's output and 26 embeddings: 27 vectors
// of 16), forward and backward: dot_interaction, then its gradient.
// bench/dot_interaction_torch.py times torch's bmm + triangle gather and
// its backward on the same shapes.
func BenchmarkDotInteraction(b *testing.B) {
	const batch, f, d = 128, 27, 16
	r := rand.New(rand.NewPCG(1, 2))
	x := randTensor(r, batch, f, d)
	z := tensor.New(tensor.F32, tensor.Shape{batch, ops.InteractionPairs(f, false)})
	dz := randTensor(r, batch, ops.InteractionPairs(f, false))
	dx := tensor.New(tensor.F32, tensor.Shape{batch, f, d})
	fwd, err := Build("dot_interaction", Args{In: []*tensor.Tensor{x}, Out: []*tensor.Tensor{z}, Attrs: ops.Attrs{"self": false}})
	if err != nil {
		b.Fatal(err)
	}
	bwd, err := Build("dot_interaction_grad", Args{In: []*tensor.Tensor{dz, x}, Out: []*tensor.Tensor{dx}, Attrs: ops.Attrs{"self": false}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		fwd(nil)
		bwd(nil)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/step")
}
