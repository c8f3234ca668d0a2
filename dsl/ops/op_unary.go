package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// Element-wise unary ops and the helper ops their gradients use.

func init() {
	register(
		unary("relu", "y = max(x, 0)", func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("relu_grad", []string{g.OutGrads[0], g.Outputs[0]}, nil)}
		}),
		unary("sigmoid", "y = 1 / (1 + exp(-x))", func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("sigmoid_grad", []string{g.OutGrads[0], g.Outputs[0]}, nil)}
		}),
		unary("tanh", "y = tanh(x)", func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("tanh_grad", []string{g.OutGrads[0], g.Outputs[0]}, nil)}
		}),
		unary("sqrt", "y = sqrt(x)", func(b GradBuilder, g GradArgs) []string {
			// dx = dy / (2 y)
			return []string{b.Emit("div", []string{g.OutGrads[0], b.Emit("scale", []string{g.Outputs[0]}, Attrs{"factor": 2.0})}, nil)}
		}),
		&Def{
			Name: "identity", Doc: "y = x (a copy); x float32, or int32 ids or int64 keys",
			Inputs: []string{"x"}, Outputs: []string{"y"},
			Infer: func(in []Type, _ Attrs) ([]Type, error) {
				if !castable(in[0].DType) {
					return nil, Errorf("input must be float32, int32 or int64, got %v", in[0])
				}
				return []Type{{DType: in[0].DType, Shape: in[0].Shape.Clone()}}, nil
			},
			Grad:        func(b GradBuilder, g GradArgs) []string { return []string{g.OutGrads[0]} },
			ElementWise: true,
		},
		binaryHelper("relu_grad", "dx = dy where y > 0, else 0"),
		binaryHelper("sigmoid_grad", "dx = dy * y * (1 - y)"),
		binaryHelper("tanh_grad", "dx = dy * (1 - y²)"),
	)
	register(&Def{
		Name: "scale", Doc: "y = factor * x + bias",
		Inputs: []string{"x"}, Outputs: []string{"y"},
		Attrs: []AttrSpec{
			{Name: "factor", Kind: AttrFloat, Default: 1.0},
			{Name: "bias", Kind: AttrFloat, Default: 0.0},
		},
		Infer: inferSameF32,
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("scale", []string{g.OutGrads[0]}, Attrs{"factor": g.Attrs.Float("factor")})}
		},
		ElementWise: true,
	})
}

func inferSameF32(in []Type, _ Attrs) ([]Type, error) {
	if in[0].DType != ir.F32 {
		return nil, Errorf("input must be float32, got %v", in[0])
	}
	return []Type{{DType: ir.F32, Shape: in[0].Shape.Clone()}}, nil
}

func unary(name, doc string, grad func(GradBuilder, GradArgs) []string) *Def {
	return &Def{
		Name: name, Doc: doc,
		Inputs: []string{"x"}, Outputs: []string{"y"},
		Infer: inferSameF32, Grad: grad,
		ElementWise: true,
	}
}

// binaryHelper defines a same-shape two-input op used by gradient rules.
func binaryHelper(name, doc string) *Def {
	return &Def{
		Name: name, Doc: doc, Internal: true,
		Inputs: []string{"dy", "y"}, Outputs: []string{"dx"},
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			if !in[0].Shape.Equal(in[1].Shape) {
				return nil, Errorf("shapes differ: %v and %v", in[0].Shape, in[1].Shape)
			}
			return []Type{{DType: ir.F32, Shape: in[0].Shape.Clone()}}, nil
		},
		ElementWise: true,
	}
}
