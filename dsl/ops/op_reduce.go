package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/blas"
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
		Kernel: func(k KernelArgs) (Kernel, error) { return reduceKernel(k, false) },
	}, &Def{
		Name: "mean", Doc: "mean of all elements, or along axis",
		Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: []AttrSpec{axisAttr},
		Infer: inferReduce,
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("mean_grad", []string{g.OutGrads[0], g.Inputs[0]}, axisOf(g.Attrs))}
		},
		Kernel: func(k KernelArgs) (Kernel, error) { return reduceKernel(k, true) },
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
		Kernel: func(k KernelArgs) (Kernel, error) {
			dy, dx := k.In[0], k.Out[0]
			n := dx.Numel()
			if k.Attrs.Has("axis") {
				n = dx.Shape[normAxis(k.Attrs.Int("axis"), len(dx.Shape))]
			}
			inv := 1 / float32(max(n, 1))
			v := virtualShape(dy.Shape, dx.Shape, k.Attrs)
			it := newIndexer(v, v, dx.Shape)
			return func(Runtime) error {
				if len(dy.F) == 1 {
					s := dy.F[0] * inv
					for i := range dx.F {
						dx.F[i] = s
					}
					return nil
				}
				it.reset()
				for i := range dx.F {
					dx.F[i] = dy.F[it.ia] * inv
					it.next()
				}
				return nil
			}, nil
		},
	}, &Def{
		Name: "broadcast_like", Doc: "y = dy broadcast to the shape of x (with axis: dy lacks that axis)", Internal: true,
		Inputs: []string{"dy", "x"}, Outputs: []string{"y"}, Attrs: []AttrSpec{axisAttr},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			v := virtualShape(in[0].Shape, in[1].Shape, a)
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
		Kernel: func(k KernelArgs) (Kernel, error) {
			dy, y := k.In[0], k.Out[0]
			v := virtualShape(dy.Shape, y.Shape, k.Attrs)
			it := newIndexer(v, v, y.Shape)
			return func(Runtime) error {
				if len(dy.F) == 1 {
					s := dy.F[0]
					for i := range y.F {
						y.F[i] = s
					}
					return nil
				}
				it.reset()
				for i := range y.F {
					y.F[i] = dy.F[it.ia]
					it.next()
				}
				return nil
			}, nil
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
		Kernel: func(k KernelArgs) (Kernel, error) {
			x, y := k.In[0], k.Out[0]
			kind := classify(y.Shape, x.Shape)
			it := newIndexer(x.Shape, y.Shape, x.Shape)
			return func(Runtime) error {
				switch kind {
				case bcSame:
					copy(y.F, x.F)
				case bcScalar:
					var s float32
					for _, v := range x.F {
						s += v
					}
					y.F[0] = s
				case bcSuffix:
					blas.SumRows(x.F, len(x.F)/len(y.F), y.F)
				default:
					clear(y.F)
					it.reset()
					for _, v := range x.F {
						y.F[it.ib] += v
						it.next()
					}
				}
				return nil
			}, nil
		},
	})
}

func axisOf(a Attrs) Attrs {
	if a.Has("axis") {
		return Attrs{"axis": a.Int("axis")}
	}
	return nil
}

func normAxis(axis, rank int) int {
	if axis < 0 {
		axis += rank
	}
	return axis
}

// virtualShape is dy's shape with the reduced axis put back as 1.
func virtualShape(dy, x ir.Shape, a Attrs) ir.Shape {
	if !a.Has("axis") {
		return dy
	}
	ax := normAxis(a.Int("axis"), len(x))
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
	ax := normAxis(a.Int("axis"), len(x.Shape))
	if ax < 0 || ax >= len(x.Shape) {
		return nil, Errorf("axis %d is out of range for shape %v", a.Int("axis"), x.Shape)
	}
	s := append(x.Shape[:ax:ax].Clone(), x.Shape[ax+1:]...)
	return []Type{{DType: ir.F32, Shape: s}}, nil
}

func reduceKernel(k KernelArgs, mean bool) (Kernel, error) {
	x, y := k.In[0], k.Out[0]
	if !k.Attrs.Has("axis") {
		inv := 1 / float64(max(x.Numel(), 1))
		return func(Runtime) error {
			var s float64
			for _, v := range x.F {
				s += float64(v)
			}
			if mean {
				s *= inv
			}
			y.F[0] = float32(s)
			return nil
		}, nil
	}
	ax := normAxis(k.Attrs.Int("axis"), len(x.Shape))
	outer := x.Shape[:ax].Numel()
	n := x.Shape[ax]
	inner := x.Shape[ax+1:].Numel()
	scale := float32(1)
	if mean {
		scale = 1 / float32(n)
	}
	return func(Runtime) error {
		clear(y.F)
		for o := 0; o < outer; o++ {
			yo := y.F[o*inner : (o+1)*inner]
			for j := 0; j < n; j++ {
				xo := x.F[(o*n+j)*inner : (o*n+j+1)*inner]
				for i, v := range xo {
					yo[i] += v
				}
			}
			if mean {
				for i := range yo {
					yo[i] *= scale
				}
			}
		}
		return nil
	}, nil
}
