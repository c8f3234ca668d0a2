package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// Reductions (sum, mean, reduce_max, logsumexp), the gradient helpers
// broadcast_like, mean_grad, reduce_max_grad and logsumexp_grad, and
// sum_to, which reduces a broadcast gradient back to its input's shape.

// reduceAttrs are the attributes of every reduction: the axis, and whether
// the reduced axis stays as a dimension of 1. Both are optional without a
// default, so a model that does not use them reads back unchanged.
var reduceAttrs = []AttrSpec{
	{Name: "axis", Kind: AttrInt, Doc: "reduce only this axis (negative counts from the end); absent: every axis"},
	{Name: "keepdims", Kind: AttrBool, Doc: "true: the reduced axis stays, as a dimension of 1 (absent or false: it is removed)"},
}

func init() {
	register(&Def{
		Name: "sum", Doc: "sum of all elements, or along axis",
		Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: reduceAttrs,
		Infer: inferReduce,
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("broadcast_like", []string{g.OutGrads[0], g.Inputs[0]}, axisOf(g.Attrs))}
		},
	}, &Def{
		Name: "mean", Doc: "mean of all elements, or along axis",
		Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: reduceAttrs,
		Infer: inferReduce,
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("mean_grad", []string{g.OutGrads[0], g.Inputs[0]}, axisOf(g.Attrs))}
		},
	}, &Def{
		Name: "reduce_max", Doc: "the largest element, or the largest along axis; the gradient goes to the first largest",
		Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: reduceAttrs,
		Infer: inferReduce,
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("reduce_max_grad", []string{g.OutGrads[0], g.Inputs[0]}, axisOf(g.Attrs))}
		},
	}, &Def{
		Name: "reduce_max_grad", Doc: "dx = dy at the first largest element of x (along axis), 0 elsewhere", Internal: true,
		Inputs: []string{"dy", "x"}, Outputs: []string{"dx"}, Attrs: reduceAttrs,
		Infer: inferReduceGrad,
	}, &Def{
		Name: "logsumexp", Doc: "y = log(sum(exp(x))) over every element or along axis, computed as m + log(sum(exp(x - m))) with m the largest",
		Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: reduceAttrs,
		Infer: inferReduce,
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("logsumexp_grad", []string{g.OutGrads[0], g.Inputs[0], g.Outputs[0]}, axisOf(g.Attrs))}
		},
	}, &Def{
		Name: "logsumexp_grad", Doc: "dx = dy * exp(x - y) (dy and y broadcast back along axis): dy times the softmax of x along axis", Internal: true,
		Inputs: []string{"dy", "x", "y"}, Outputs: []string{"dx"}, Attrs: reduceAttrs,
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if !in[2].Shape.Equal(in[0].Shape) {
				return nil, Errorf("y %v must have the shape of dy %v", in[2].Shape, in[0].Shape)
			}
			return inferReduceGrad(in[:2], a)
		},
	}, &Def{
		// The count is taken from the tensors when the kernel is built, not
		// fixed in an attribute, so a backward pass generated at train.batch
		// is right at any batch.
		Name: "mean_grad", Doc: "dx = dy broadcast to the shape of x (with axis: dy lacks that axis), divided by the number of elements averaged", Internal: true,
		Inputs: []string{"dy", "x"}, Outputs: []string{"dx"}, Attrs: reduceAttrs,
		Infer: inferReduceGrad,
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("mean", []string{g.OutGrads[0]}, axisOf(g.Attrs)), ""}
		},
	}, &Def{
		Name: "broadcast_like", Doc: "y = dy broadcast to the shape of x (with axis: dy lacks that axis)", Internal: true,
		Inputs: []string{"dy", "x"}, Outputs: []string{"y"}, Attrs: reduceAttrs,
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			v := VirtualShape(in[0].Shape, in[1].Shape, a)
			if _, err := BroadcastShape(v, in[1].Shape); err != nil {
				return nil, err
			}
			return []Type{{DType: ir.F32, Shape: in[1].Shape.Clone()}}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			dx := g.OutGrads[0]
			if g.Attrs.Has("axis") {
				// dy lacks the axis: sum it out first
				dx = b.Emit("sum", []string{dx}, axisOf(g.Attrs))
			}
			return []string{sumTo(b, dx, g.Inputs[0]), ""}
		},
	}, &Def{
		Name: "sum_to", Doc: "y = x summed over the dimensions along which like was broadcast; y has like's shape", Internal: true,
		Inputs: []string{"x", "like"}, Outputs: []string{"y"},
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			s, err := BroadcastShape(in[0].Shape, in[1].Shape)
			if err != nil || !s.Equal(in[0].Shape) {
				return nil, Errorf("cannot sum %v to %v", in[0].Shape, in[1].Shape)
			}
			return []Type{{DType: ir.F32, Shape: in[1].Shape.Clone()}}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("broadcast_like", []string{g.OutGrads[0], g.Inputs[0]}, nil), ""}
		},
	})
}

// axisOf is the reduction attributes of a, for the ops its gradient emits.
func axisOf(a Attrs) Attrs {
	var out Attrs
	if a.Has("axis") {
		out = Attrs{"axis": a.Int("axis")}
	}
	if a.Bool("keepdims") {
		if out == nil {
			out = Attrs{}
		}
		out["keepdims"] = true
	}
	return out
}

// NormAxis makes a negative axis count from the end of a shape of rank rank.
func NormAxis(axis, rank int) int {
	if axis < 0 {
		axis += rank
	}
	return axis
}

// VirtualShape is the shape of dy, the reduction of x along attribute
// axis, with the reduced axis put back as 1 (dy itself without axis, or
// with keepdims, which kept it).
func VirtualShape(dy, x ir.Shape, a Attrs) ir.Shape {
	if !a.Has("axis") || a.Bool("keepdims") {
		return dy
	}
	ax := NormAxis(a.Int("axis"), len(x))
	v := make(ir.Shape, 0, len(dy)+1)
	v = append(v, dy[:min(ax, len(dy))]...)
	v = append(v, 1)
	if ax < len(dy) {
		v = append(v, dy[ax:]...)
	}
	return v
}

// inferReduceGrad types the gradient dx of a reduction of x from dy.
func inferReduceGrad(in []Type, a Attrs) ([]Type, error) {
	r, err := inferReduce(in[1:], a)
	if err != nil {
		return nil, err
	}
	if !in[0].Shape.Equal(r[0].Shape) {
		return nil, Errorf("dy %v must have the shape of the reduction of %v, %v", in[0].Shape, in[1].Shape, r[0].Shape)
	}
	return []Type{{DType: ir.F32, Shape: in[1].Shape.Clone()}}, nil
}

func inferReduce(in []Type, a Attrs) ([]Type, error) {
	x := in[0]
	if x.DType != ir.F32 {
		return nil, Errorf("input must be float32, got %v", x)
	}
	if err := reduceAxis(x.Shape, a); err != nil {
		return nil, err
	}
	return []Type{{DType: ir.F32, Shape: reducedShape(x.Shape, a)}}, nil
}

// reducedShape is the shape of a reduction of x along attribute axis
// (every axis without it), the reduced axes kept as 1 with keepdims. The
// axis must be in range (reduceAxis checks it).
func reducedShape(x ir.Shape, a Attrs) ir.Shape {
	keep := a.Bool("keepdims")
	if !a.Has("axis") {
		if !keep {
			return nil // a scalar
		}
		s := make(ir.Shape, len(x))
		for i := range s {
			s[i] = 1
		}
		return s
	}
	ax := NormAxis(a.Int("axis"), len(x))
	if keep {
		s := x.Clone()
		s[ax] = 1
		return s
	}
	return append(x[:ax:ax].Clone(), x[ax+1:]...)
}

// reduceAxis checks attribute axis against the rank of x.
func reduceAxis(x ir.Shape, a Attrs) error {
	if !a.Has("axis") {
		return nil
	}
	if ax := NormAxis(a.Int("axis"), len(x)); ax < 0 || ax >= len(x) {
		return Errorf("axis %d is out of range for shape %v", a.Int("axis"), x)
	}
	return nil
}
