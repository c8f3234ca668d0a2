package ops

import (
	"math"

	"github.com/psgraph/psgraph/exec/blas"

	"github.com/psgraph/psgraph/dsl/ir"
)

// Element-wise unary ops and the helper ops their gradients use.

func init() {
	register(
		unary("relu", "y = max(x, 0)", blas.Relu, func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("relu_grad", []string{g.OutGrads[0], g.Outputs[0]}, nil)}
		}),
		unary("sigmoid", "y = 1 / (1 + exp(-x))", func(x, y []float32) {
			for i, v := range x[:len(y)] {
				y[i] = sigmoid(v)
			}
		}, func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("sigmoid_grad", []string{g.OutGrads[0], g.Outputs[0]}, nil)}
		}),
		unary("tanh", "y = tanh(x)", func(x, y []float32) {
			for i, v := range x[:len(y)] {
				y[i] = float32(math.Tanh(float64(v)))
			}
		}, func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("tanh_grad", []string{g.OutGrads[0], g.Outputs[0]}, nil)}
		}),
		unary("sqrt", "y = sqrt(x)", func(x, y []float32) {
			for i, v := range x[:len(y)] {
				y[i] = float32(math.Sqrt(float64(v)))
			}
		}, func(b GradBuilder, g GradArgs) []string {
			// dx = dy / (2 y)
			return []string{b.Emit("div", []string{g.OutGrads[0], b.Emit("scale", []string{g.Outputs[0]}, Attrs{"factor": 2.0})}, nil)}
		}),
		unary("identity", "y = x (a copy)", func(x, y []float32) { copy(y, x) },
			func(b GradBuilder, g GradArgs) []string { return []string{g.OutGrads[0]} }),
		binaryHelper("relu_grad", "dx = dy where y > 0, else 0", blas.ReluGrad),
		binaryHelper("sigmoid_grad", "dx = dy * y * (1 - y)", func(dy, y, dx []float32) {
			for i := range dx {
				dx[i] = dy[i] * y[i] * (1 - y[i])
			}
		}),
		binaryHelper("tanh_grad", "dx = dy * (1 - y²)", func(dy, y, dx []float32) {
			for i := range dx {
				dx[i] = dy[i] * (1 - y[i]*y[i])
			}
		}),
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
		Kernel: func(k KernelArgs) (Kernel, error) {
			x, y := k.In[0], k.Out[0]
			f, c := float32(k.Attrs.Float("factor")), float32(k.Attrs.Float("bias"))
			return func(Runtime) error { blas.Scale(f, c, x.F, y.F); return nil }, nil
		},
		ElementWise: true,
	})
}

func sigmoid(v float32) float32 {
	if v >= 0 {
		return float32(1 / (1 + math.Exp(-float64(v))))
	}
	e := math.Exp(float64(v))
	return float32(e / (1 + e))
}

func inferSameF32(in []Type, _ Attrs) ([]Type, error) {
	if in[0].DType != ir.F32 {
		return nil, Errorf("input must be float32, got %v", in[0])
	}
	return []Type{{DType: ir.F32, Shape: in[0].Shape.Clone()}}, nil
}

func unary(name, doc string, f func(x, y []float32), grad func(GradBuilder, GradArgs) []string) *Def {
	return &Def{
		Name: name, Doc: doc,
		Inputs: []string{"x"}, Outputs: []string{"y"},
		Infer: inferSameF32, Grad: grad,
		Kernel: func(k KernelArgs) (Kernel, error) {
			x, y := k.In[0], k.Out[0]
			return func(Runtime) error { f(x.F, y.F); return nil }, nil
		},
		ElementWise: true,
	}
}

// binaryHelper defines a same-shape two-input op used by gradient rules.
func binaryHelper(name, doc string, f func(a, b, out []float32)) *Def {
	return &Def{
		Name: name, Doc: doc, Internal: true,
		Inputs: []string{"dy", "y"}, Outputs: []string{"dx"},
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			if !in[0].Shape.Equal(in[1].Shape) {
				return nil, Errorf("shapes differ: %v and %v", in[0].Shape, in[1].Shape)
			}
			return []Type{{DType: ir.F32, Shape: in[0].Shape.Clone()}}, nil
		},
		Kernel: func(k KernelArgs) (Kernel, error) {
			a, b, out := k.In[0], k.In[1], k.Out[0]
			return func(Runtime) error { f(a.F, b.F[:len(out.F)], out.F[:len(a.F)]); return nil }, nil
		},
		ElementWise: true,
	}
}
