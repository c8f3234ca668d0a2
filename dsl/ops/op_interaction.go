package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// dot_interaction is DLRM's "dot" feature interaction, fused: for each
// row b of x [B, F, D] (F feature vectors of D values), the dot products
// x[b, i] · x[b, j] of every pair j < i (j <= i with self), in
// facebookresearch/dlrm's order: row-major over i, then j (its
// interact_features: Z = bmm(T, Tᵀ), Z[:, li, lj] with li, lj = [(i, j)
// for i in range(F) for j in range(i + offset)]). One op instead of a
// batch_matmul, a gather of the triangle and their gradients: one pass
// over x each way and no [B, F, F] temporary.

func init() {
	selfAttr := AttrSpec{Name: "self", Kind: AttrBool, Default: false, Doc: "include each vector's product with itself (the diagonal; DLRM's arch_interaction_itself)"}
	register(&Def{
		Name: "dot_interaction", Doc: "z[b, p] = x[b, i] · x[b, j] for x [B, F, D] and every pair j < i (j <= i with self), p counting the pairs row-major over i: DLRM's dot interaction, F(F-1)/2 values per row (F(F+1)/2 with self)",
		Inputs: []string{"x"}, Outputs: []string{"z"},
		Attrs: []AttrSpec{selfAttr},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			x := in[0]
			if err := checkInteraction(x, a); err != nil {
				return nil, err
			}
			return []Type{F32(x.Shape[0], InteractionPairs(x.Shape[1], a.Bool("self")))}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("dot_interaction_grad", []string{g.OutGrads[0], g.Inputs[0]}, Attrs{"self": g.Attrs.Bool("self")})}
		},
	}, &Def{
		Name: "dot_interaction_grad", Doc: "dx[b] = (G + Gᵀ) x[b], G [F, F] holding dz[b] at its pairs (zero elsewhere)", Internal: true,
		Inputs: []string{"dz", "x"}, Outputs: []string{"dx"},
		Attrs: []AttrSpec{selfAttr},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			dz, x := in[0], in[1]
			if err := checkInteraction(x, a); err != nil {
				return nil, err
			}
			want := ir.Shape{x.Shape[0], InteractionPairs(x.Shape[1], a.Bool("self"))}
			if dz.DType != ir.F32 || !dz.Shape.Equal(want) {
				return nil, Errorf("dz must be float32 %v (the pairs of x %v), got %v", want, x.Shape, dz)
			}
			return []Type{F32(x.Shape...)}, nil
		},
	})
}

// InteractionPairs is the number of pairs dot_interaction computes of f
// vectors: f(f-1)/2, or f(f+1)/2 with self.
func InteractionPairs(f int, self bool) int {
	if self {
		return f * (f + 1) / 2
	}
	return f * (f - 1) / 2
}

func checkInteraction(x Type, a Attrs) error {
	if x.DType != ir.F32 || len(x.Shape) != 3 {
		return Errorf("x must be float32 [B, F, D] (F feature vectors of D values per row; stack builds it from F inputs [B, D]), got %v", x)
	}
	if x.Shape[1] < 2 && !a.Bool("self") {
		return Errorf("x %v has %d feature vector: there is no pair to interact (set self: true for its square)", x.Shape, x.Shape[1])
	}
	return nil
}
