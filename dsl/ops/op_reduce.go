package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// Reductions (sum, mean), their gradient helper broadcast_like, and sum_to,
// which reduces a broadcast gradient back to its input's shape.

func init() {
	axisAttr := AttrSpec{Name: "axis", Kind: AttrInt, Doc: "reduce only this axis (negative counts from the end); absent: reduce to a scalar"}
	register(&Def{
		Name: "sum", Doc: "sum of all elements, or along axis",
		Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: []AttrSpec{axisAttr},
		Infer: inferReduce,
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("broadcast_like", []string{g.OutGrads[0], g.Inputs[0]}, axisOf(g.Attrs))}
		},
	}, &Def{
		Name: "mean", Doc: "mean of all elements, or along axis",
		Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: []AttrSpec{axisAttr},
		Infer: inferReduce,
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("mean_grad", []string{g.OutGrads[0], g.Inputs[0]}, axisOf(g.Attrs))}
		},
	}, &Def{
		// The count is taken from the tensors when the kernel is built, not
		// fixed in an attribute, so a backward pass generated at train.batch
		// is right at any batch.
		Name: "mean_grad", Doc: "dx = dy broadcast to the shape of x (with axis: dy lacks that axis), divided by the number of elements averaged", Internal: true,
		Inputs: []string{"dy", "x"}, Outputs: []string{"dx"}, Attrs: []AttrSpec{axisAttr},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			r, err := inferReduce(in[1:], a)
			if err != nil {
				return nil, err
			}
			if !in[0].Shape.Equal(r[0].Shape) {
				return nil, Errorf("dy %v must have the shape of the mean of %v, %v", in[0].Shape, in[1].Shape, r[0].Shape)
			}
			return []Type{{DType: ir.F32, Shape: in[1].Shape.Clone()}}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("mean", []string{g.OutGrads[0]}, axisOf(g.Attrs)), ""}
		},
	}, &Def{
		Name: "broadcast_like", Doc: "y = dy broadcast to the shape of x (with axis: dy lacks that axis)", Internal: true,
		Inputs: []string{"dy", "x"}, Outputs: []string{"y"}, Attrs: []AttrSpec{axisAttr},
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

func axisOf(a Attrs) Attrs {
	if a.Has("axis") {
		return Attrs{"axis": a.Int("axis")}
	}
	return nil
}

// NormAxis makes a negative axis count from the end of a shape of rank rank.
func NormAxis(axis, rank int) int {
	if axis < 0 {
		axis += rank
	}
	return axis
}

// VirtualShape is the shape of dy, the reduction of x along attribute
// axis, with the reduced axis put back as 1 (dy itself without axis).
func VirtualShape(dy, x ir.Shape, a Attrs) ir.Shape {
	if !a.Has("axis") {
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

func inferReduce(in []Type, a Attrs) ([]Type, error) {
	x := in[0]
	if x.DType != ir.F32 {
		return nil, Errorf("input must be float32, got %v", x)
	}
	if !a.Has("axis") {
		return []Type{F32()}, nil
	}
	ax := NormAxis(a.Int("axis"), len(x.Shape))
	if ax < 0 || ax >= len(x.Shape) {
		return nil, Errorf("axis %d is out of range for shape %v", a.Int("axis"), x.Shape)
	}
	s := append(x.Shape[:ax:ax].Clone(), x.Shape[ax+1:]...)
	return []Type{{DType: ir.F32, Shape: s}}, nil
}
