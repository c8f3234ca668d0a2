package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// Normalization: layer_norm over the last axis, batch_norm over the batch
// with running statistics, and the internal standardize and
// standardize_grad both gradients are written with.

func init() {
	epsAttr := AttrSpec{Name: "eps", Kind: AttrFloat, Default: 1e-5, Doc: "added to the variance before the square root (torch's default)"}
	register(&Def{
		Name: "layer_norm", Doc: "y = gamma * (x - mean) / sqrt(var + eps) + beta, mean and (biased) var over the last axis of x; gamma and beta have the last axis' size (torch.nn.LayerNorm)",
		Inputs: []string{"x", "gamma", "beta"}, Outputs: []string{"y"},
		Attrs: []AttrSpec{epsAttr},
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			x := in[0]
			if x.DType != ir.F32 || len(x.Shape) == 0 {
				return nil, Errorf("x must be float32 with at least one axis, got %v", x)
			}
			if err := checkAffine(in[1], in[2], x.Shape[len(x.Shape)-1], "the last axis of x"); err != nil {
				return nil, err
			}
			return []Type{{DType: ir.F32, Shape: x.Shape.Clone()}}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			return gradAffineNorm(b, g, -1)
		},
	}, &Def{
		Name: "batch_norm", Doc: "in training y = gamma * (x - mean) / sqrt(var + eps) + beta with the batch's mean and (biased) var per column, and the running statistics move toward the batch's: mean_next = (1 - momentum) running_mean + momentum mean, var_next likewise with the unbiased var; in evaluation and prediction y uses running_mean and running_var, which pass unchanged (torch.nn.BatchNorm1d)",
		Inputs:  []string{"x", "gamma", "beta", "running_mean", "running_var"},
		Outputs: []string{"y", "mean_next", "var_next"},
		Attrs: []AttrSpec{
			epsAttr,
			{Name: "momentum", Kind: AttrFloat, Default: 0.1, Doc: "the weight of the batch's statistics in the running ones (torch's default)"},
		},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			x := in[0]
			if x.DType != ir.F32 || len(x.Shape) != 2 {
				return nil, Errorf("x must be float32 [batch, C], got %v", x)
			}
			if m := a.Float("momentum"); m < 0 || m > 1 {
				return nil, Errorf("momentum %g is outside [0, 1]", m)
			}
			c := x.Shape[1]
			if err := checkAffine(in[1], in[2], c, "x's columns"); err != nil {
				return nil, err
			}
			for i, name := range []string{"running_mean", "running_var"} {
				if t := in[3+i]; t.DType != ir.F32 || !t.Shape.Equal(ir.Shape{c}) {
					return nil, Errorf("%s must be float32 [%d] (x's columns), got %v", name, c, t)
				}
			}
			return []Type{{DType: ir.F32, Shape: x.Shape.Clone()}, F32(c), F32(c)}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			return append(gradAffineNorm(b, g, 0), "", "")
		},
		Updates: []Update{{In: 3, Out: 1}, {In: 4, Out: 2}},
	}, &Def{
		Name: "standardize", Doc: "y = (x - mean) / sqrt(var + eps), mean and (biased) var along axis", Internal: true,
		Inputs: []string{"x"}, Outputs: []string{"y"},
		Attrs: []AttrSpec{{Name: "axis", Kind: AttrInt, Required: true}, epsAttr},
		Infer: inferStandardize,
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("standardize_grad", []string{g.OutGrads[0], g.Inputs[0]}, Attrs{"axis": g.Attrs.Int("axis"), "eps": g.Attrs.Float("eps")})}
		},
	}, &Def{
		Name: "standardize_grad", Doc: "dx = (dy - mean(dy) - y * mean(dy * y)) / sqrt(var + eps) along axis, y = standardize(x): the gradient of standardize", Internal: true,
		Inputs: []string{"dy", "x"}, Outputs: []string{"dx"},
		Attrs: []AttrSpec{{Name: "axis", Kind: AttrInt, Required: true}, epsAttr},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if !in[0].Shape.Equal(in[1].Shape) || in[0].DType != ir.F32 {
				return nil, Errorf("dy %v must be float32 of x's shape %v", in[0], in[1].Shape)
			}
			return inferStandardize(in[1:], a)
		},
	})
}

func inferStandardize(in []Type, a Attrs) ([]Type, error) {
	x := in[0]
	if x.DType != ir.F32 {
		return nil, Errorf("x must be float32, got %v", x)
	}
	if _, err := RowAxis(x.Shape, a.Int("axis")); err != nil {
		return nil, err
	}
	if a.Float("eps") <= 0 {
		return nil, Errorf("eps %g must be positive", a.Float("eps"))
	}
	return []Type{{DType: ir.F32, Shape: x.Shape.Clone()}}, nil
}

// checkAffine checks a normalization's gamma and beta: float32 [n].
func checkAffine(gamma, beta Type, n int, what string) error {
	for i, t := range []Type{gamma, beta} {
		if t.DType != ir.F32 || !t.Shape.Equal(ir.Shape{n}) {
			return Errorf("%s must be float32 [%d] (the size of %s), got %v", []string{"gamma", "beta"}[i], n, what, t)
		}
	}
	return nil
}

// gradAffineNorm is the gradient of y = gamma * standardize(x, axis) +
// beta for x, gamma and beta: dbeta sums dy, dgamma sums dy * xhat over
// the axes gamma was broadcast along, and dx is standardize's gradient of
// dy * gamma.
func gradAffineNorm(b GradBuilder, g GradArgs, axis int) []string {
	dy, x, gamma, beta := g.OutGrads[0], g.Inputs[0], g.Inputs[1], g.Inputs[2]
	attrs := Attrs{"axis": axis, "eps": g.Attrs.Float("eps")}
	out := make([]string, 3)
	if g.Need[0] {
		out[0] = b.Emit("standardize_grad", []string{b.Emit("mul", []string{dy, gamma}, nil), x}, attrs)
	}
	if g.Need[1] {
		xhat := b.Emit("standardize", []string{x}, attrs)
		out[1] = sumTo(b, b.Emit("mul", []string{dy, xhat}, nil), gamma)
	}
	if g.Need[2] {
		out[2] = sumTo(b, dy, beta)
	}
	return out
}
