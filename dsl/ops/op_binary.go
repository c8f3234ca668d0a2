package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// add, sub, mul, div with numpy broadcasting.

func init() {
	for _, b := range []struct {
		name string
		doc  string
		grad func(b GradBuilder, g GradArgs) []string
	}{
		{"add", "z = x + y", gradAdd},
		{"sub", "z = x - y", gradSub},
		{"mul", "z = x * y (element-wise)", gradMul},
		{"div", "z = x / y (element-wise)", gradDiv},
	} {
		register(&Def{
			Name: b.name, Doc: b.doc + ", numpy-style broadcasting",
			Inputs: []string{"x", "y"}, Outputs: []string{"z"},
			Infer:       inferBinary,
			Grad:        b.grad,
			ElementWise: true,
		})
	}
}

func inferBinary(in []Type, _ Attrs) ([]Type, error) {
	if in[0].DType != ir.F32 || in[1].DType != ir.F32 {
		return nil, Errorf("inputs must be float32, got %v and %v", in[0], in[1])
	}
	s, err := BroadcastShape(in[0].Shape, in[1].Shape)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: ir.F32, Shape: s}}, nil
}

// sumTo reduces a gradient to the shape of the input it belongs to.
func sumTo(b GradBuilder, grad, like string) string {
	if b.Type(grad).Shape.Equal(b.Type(like).Shape) {
		return grad
	}
	return b.Emit("sum_to", []string{grad, like}, nil)
}

func gradAdd(b GradBuilder, g GradArgs) []string {
	dz := g.OutGrads[0]
	out := make([]string, 2)
	if g.Need[0] {
		out[0] = sumTo(b, dz, g.Inputs[0])
	}
	if g.Need[1] {
		out[1] = sumTo(b, dz, g.Inputs[1])
	}
	return out
}

func gradSub(b GradBuilder, g GradArgs) []string {
	dz := g.OutGrads[0]
	out := make([]string, 2)
	if g.Need[0] {
		out[0] = sumTo(b, dz, g.Inputs[0])
	}
	if g.Need[1] {
		out[1] = sumTo(b, b.Emit("scale", []string{dz}, Attrs{"factor": -1.0}), g.Inputs[1])
	}
	return out
}

func gradMul(b GradBuilder, g GradArgs) []string {
	dz, x, y := g.OutGrads[0], g.Inputs[0], g.Inputs[1]
	out := make([]string, 2)
	if g.Need[0] {
		out[0] = sumTo(b, b.Emit("mul", []string{dz, y}, nil), x)
	}
	if g.Need[1] {
		out[1] = sumTo(b, b.Emit("mul", []string{dz, x}, nil), y)
	}
	return out
}

func gradDiv(b GradBuilder, g GradArgs) []string {
	dz, x, y, z := g.OutGrads[0], g.Inputs[0], g.Inputs[1], g.Outputs[0]
	out := make([]string, 2)
	if g.Need[0] {
		out[0] = sumTo(b, b.Emit("div", []string{dz, y}, nil), x)
	}
	if g.Need[1] {
		// dy = -dz * z / y
		t := b.Emit("div", []string{b.Emit("mul", []string{dz, z}, nil), y}, nil)
		out[1] = sumTo(b, b.Emit("scale", []string{t}, Attrs{"factor": -1.0}), y)
	}
	return out
}
