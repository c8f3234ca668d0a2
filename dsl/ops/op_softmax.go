package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// softmax over the last axis and the helper op its gradient uses.

func init() {
	register(&Def{
		Name: "softmax", Doc: "y = exp(x - max) / sum(exp(x - max)) over the last axis",
		Inputs: []string{"x"}, Outputs: []string{"y"},
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			x := in[0]
			if x.DType != ir.F32 || len(x.Shape) == 0 {
				return nil, Errorf("input must be float32 with at least one axis, got %v", x)
			}
			return []Type{{DType: ir.F32, Shape: x.Shape.Clone()}}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("softmax_grad", []string{g.OutGrads[0], g.Outputs[0]}, nil)}
		},
	}, &Def{
		Name: "softmax_grad", Doc: "dx = y * (dy - sum(dy * y)) over the last axis, where y = softmax(x)", Internal: true,
		Inputs: []string{"dy", "y"}, Outputs: []string{"dx"},
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			if !in[0].Shape.Equal(in[1].Shape) || len(in[0].Shape) == 0 {
				return nil, Errorf("dy %v and y %v must have the same shape, with at least one axis", in[0].Shape, in[1].Shape)
			}
			return []Type{{DType: ir.F32, Shape: in[1].Shape.Clone()}}, nil
		},
	})
}
