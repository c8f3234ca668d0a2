package ops

import (
	"math"

	"github.com/psgraph/psgraph/dsl/ir"
)

// Element-wise math for schedules and clipping (cos, sin, exp, log, floor,
// clip, min, max, less, greater), sum_squares for clipping by norm and the
// training step as a value (step).

func init() {
	register(
		unary("cos", "y = cos(x)", func(b GradBuilder, g GradArgs) []string {
			// dx = -dy * sin(x)
			s := b.Emit("scale", []string{b.Emit("sin", []string{g.Inputs[0]}, nil)}, Attrs{"factor": -1.0})
			return []string{b.Emit("mul", []string{g.OutGrads[0], s}, nil)}
		}),
		unary("sin", "y = sin(x)", func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("mul", []string{g.OutGrads[0], b.Emit("cos", []string{g.Inputs[0]}, nil)}, nil)}
		}),
		unary("exp", "y = exp(x)", func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("mul", []string{g.OutGrads[0], g.Outputs[0]}, nil)}
		}),
		unary("log", "y = ln(x) (NaN for x < 0, -Inf at 0)", func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("div", []string{g.OutGrads[0], g.Inputs[0]}, nil)}
		}),
		unary("floor", "y = floor(x) (not differentiable: no gradient flows through)", nil),
	)
	clipAttrs := []AttrSpec{
		{Name: "min", Kind: AttrFloat, Default: -math.MaxFloat32, Doc: "lower bound"},
		{Name: "max", Kind: AttrFloat, Default: math.MaxFloat32, Doc: "upper bound"},
	}
	register(&Def{
		Name: "clip", Doc: "y = min(max(x, min), max), element-wise",
		Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: clipAttrs,
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if a.Float("min") > a.Float("max") {
				return nil, Errorf("clip min %g is above max %g", a.Float("min"), a.Float("max"))
			}
			return inferSameF32(in, a)
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("clip_grad", []string{g.OutGrads[0], g.Inputs[0]}, Attrs{"min": g.Attrs.Float("min"), "max": g.Attrs.Float("max")})}
		},
		ElementWise: true,
	}, &Def{
		Name: "clip_grad", Doc: "dx = dy where min <= x <= max, else 0 (as torch.clamp)", Internal: true,
		Inputs: []string{"dy", "x"}, Outputs: []string{"dx"}, Attrs: clipAttrs,
		Infer:       binaryHelper("", "").Infer,
		ElementWise: true,
	})
	for _, b := range []struct {
		name, doc string
		grad      func(b GradBuilder, g GradArgs) []string
	}{
		{"min", "z = min(x, y) element-wise", gradMinMax("less")},
		{"max", "z = max(x, y) element-wise", gradMinMax("greater")},
		{"less", "z = 1 where x < y, else 0 (not differentiable)", nil},
		{"greater", "z = 1 where x > y, else 0 (not differentiable)", nil},
	} {
		register(&Def{
			Name: b.name, Doc: b.doc + ", numpy-style broadcasting",
			Inputs: []string{"x", "y"}, Outputs: []string{"z"},
			Infer:       inferBinary,
			Grad:        b.grad,
			ElementWise: true,
		})
	}
	register(&Def{
		Name: "sum_squares", Doc: "y = the sum of x², a scalar (over a row block: the block's part of the whole's)",
		Inputs: []string{"x"}, Outputs: []string{"y"},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if in[0].DType != ir.F32 {
				return nil, Errorf("input must be float32, got %v", in[0])
			}
			return []Type{F32()}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			// dx = 2 x dy
			return []string{b.Emit("mul", []string{b.Emit("scale", []string{g.Inputs[0]}, Attrs{"factor": 2.0}), g.OutGrads[0]}, nil)}
		},
	})
	register(&Def{
		Name: "step", Doc: "y = the number of the training step being run, from 1 (float32 scalar); optimizer templates read it as $step",
		Outputs: []string{"y"},
		Infer: func([]Type, Attrs) ([]Type, error) {
			return []Type{{DType: ir.F32, Shape: ir.Shape{}}}, nil
		},
		// A scalar source: a row block of a parameter computes the same value.
		ElementWise: true,
	})
}

// gradMinMax: the gradient goes to x where pick(x, y) holds (x is the one
// chosen), to y elsewhere; ties go to y.
func gradMinMax(pick string) func(b GradBuilder, g GradArgs) []string {
	return func(b GradBuilder, g GradArgs) []string {
		dz, x, y := g.OutGrads[0], g.Inputs[0], g.Inputs[1]
		mask := b.Emit(pick, []string{x, y}, nil)
		out := make([]string, 2)
		if g.Need[0] {
			out[0] = sumTo(b, b.Emit("mul", []string{dz, mask}, nil), x)
		}
		if g.Need[1] {
			inv := b.Emit("scale", []string{mask}, Attrs{"factor": -1.0, "bias": 1.0})
			out[1] = sumTo(b, b.Emit("mul", []string{dz, inv}, nil), y)
		}
		return out
	}
}
