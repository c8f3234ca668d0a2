package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// slice_rows and concat cut and join tensors along one axis (dim 0 by
// default). split uses them for parameter blocks: a trainer slices a
// gradient into row blocks before sending and concatenates the received
// parameter blocks; each is the other's gradient.

func init() {
	register(&Def{
		Name: "slice_rows", Doc: "y = x[start:end] along `axis` (default 0: whole rows)",
		Inputs: []string{"x"}, Outputs: []string{"y"},
		Attrs: []AttrSpec{
			{Name: "start", Kind: AttrInt, Required: true},
			{Name: "end", Kind: AttrInt, Required: true},
			{Name: "axis", Kind: AttrInt, Default: 0},
		},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			ax, err := RowAxis(in[0].Shape, a.Int("axis"))
			if err != nil {
				return nil, err
			}
			s, e := a.Int("start"), a.Int("end")
			if n := in[0].Shape[ax]; s < 0 || e > n || s >= e {
				return nil, Errorf("range [%d, %d) is not a non-empty part of [0, %d) along axis %d", s, e, n, ax)
			}
			out := in[0].Shape.Clone()
			out[ax] = e - s
			return []Type{{DType: in[0].DType, Shape: out}}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			rows := b.Type(g.Inputs[0]).Shape
			ax, _ := RowAxis(rows, g.Attrs.Int("axis"))
			return []string{b.Emit("pad_rows", []string{g.OutGrads[0]}, Attrs{"start": g.Attrs.Int("start"), "size": rows[ax], "axis": ax})}
		},
	}, &Def{
		Name: "pad_rows", Doc: "y = zeros with `size` entries along `axis`, x placed at [start, start+len)", Internal: true,
		Inputs: []string{"x"}, Outputs: []string{"y"},
		Attrs: []AttrSpec{
			{Name: "start", Kind: AttrInt, Required: true},
			{Name: "size", Kind: AttrInt, Required: true},
			{Name: "axis", Kind: AttrInt, Default: 0},
		},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			ax, err := RowAxis(in[0].Shape, a.Int("axis"))
			if err != nil {
				return nil, err
			}
			if s := a.Int("start"); s < 0 || s+in[0].Shape[ax] > a.Int("size") {
				return nil, Errorf("%d entries at %d do not fit in size %d", in[0].Shape[ax], s, a.Int("size"))
			}
			out := in[0].Shape.Clone()
			out[ax] = a.Int("size")
			return []Type{{DType: ir.F32, Shape: out}}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			n := b.Type(g.Inputs[0]).Shape
			ax, _ := RowAxis(n, g.Attrs.Int("axis"))
			s := g.Attrs.Int("start")
			return []string{b.Emit("slice_rows", []string{g.OutGrads[0]}, Attrs{"start": s, "end": s + n[ax], "axis": ax})}
		},
	}, &Def{
		Name: "concat", Doc: "y = the inputs joined along `axis` (default 0)",
		Inputs: []string{"xs..."}, Outputs: []string{"y"}, MinInputs: 1, MaxInputs: -1,
		Attrs: []AttrSpec{{Name: "axis", Kind: AttrInt, Default: 0}},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			ax, err := RowAxis(in[0].Shape, a.Int("axis"))
			if err != nil {
				return nil, err
			}
			out := in[0].Shape.Clone()
			out[ax] = 0
			for i, t := range in {
				if t.DType != in[0].DType || len(t.Shape) != len(out) {
					return nil, Errorf("input %d is %v, input 0 is %v: dtypes and ranks must match", i, t, in[0])
				}
				for d := range out {
					if d != ax && t.Shape[d] != out[d] {
						return nil, Errorf("input %d is %v, input 0 is %v: only axis %d may differ", i, t, in[0], ax)
					}
				}
				out[ax] += t.Shape[ax]
			}
			return []Type{{DType: in[0].DType, Shape: out}}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			grads := make([]string, len(g.Inputs))
			ax, _ := RowAxis(b.Type(g.Inputs[0]).Shape, g.Attrs.Int("axis"))
			off := 0
			for i, in := range g.Inputs {
				n := b.Type(in).Shape[ax]
				if g.Need[i] {
					grads[i] = b.Emit("slice_rows", []string{g.OutGrads[0]}, Attrs{"start": off, "end": off + n, "axis": ax})
				}
				off += n
			}
			return grads
		},
	})
}

func init() {
	register(&Def{
		Name: "stack", Doc: "y = the inputs (one or more, of one shape) stacked along a new axis `axis` (default 1: F inputs [B, D] give [B, F, D])",
		Inputs: []string{"xs..."}, Outputs: []string{"y"}, MinInputs: 1, MaxInputs: -1,
		Attrs: []AttrSpec{{Name: "axis", Kind: AttrInt, Default: 1, Doc: "the new axis of y (negative counts from y's end)"}},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			for i, t := range in {
				if t.DType != in[0].DType || !t.Shape.Equal(in[0].Shape) {
					return nil, Errorf("input %d is %v, input 0 is %v: stacked inputs must have one dtype and shape", i, t, in[0])
				}
			}
			ax, err := StackAxis(in[0].Shape, a.Int("axis"))
			if err != nil {
				return nil, err
			}
			out := append(append(in[0].Shape[:ax:ax].Clone(), len(in)), in[0].Shape[ax:]...)
			return []Type{{DType: in[0].DType, Shape: out}}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			grads := make([]string, len(g.Inputs))
			ax, _ := StackAxis(b.Type(g.Inputs[0]).Shape, g.Attrs.Int("axis"))
			for i := range g.Inputs {
				if g.Need[i] {
					grads[i] = b.Emit("stack_grad", []string{g.OutGrads[0]}, Attrs{"axis": ax, "index": i})
				}
			}
			return grads
		},
	}, &Def{
		Name: "stack_grad", Doc: "dx = dy[..., index, ...] along `axis`, which is dropped (stack's gradient for input index)", Internal: true,
		Inputs: []string{"dy"}, Outputs: []string{"dx"},
		Attrs: []AttrSpec{
			{Name: "axis", Kind: AttrInt, Required: true},
			{Name: "index", Kind: AttrInt, Required: true},
		},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			ax, err := RowAxis(in[0].Shape, a.Int("axis"))
			if err != nil {
				return nil, err
			}
			if i := a.Int("index"); i < 0 || i >= in[0].Shape[ax] {
				return nil, Errorf("index %d is outside [0, %d) along axis %d of %v", i, in[0].Shape[ax], ax, in[0].Shape)
			}
			out := append(in[0].Shape[:ax:ax].Clone(), in[0].Shape[ax+1:]...)
			return []Type{{DType: in[0].DType, Shape: out}}, nil
		},
	})
}

// StackAxis normalizes stack's axis for inputs of shape s: the new axis
// of the output, of rank len(s)+1.
func StackAxis(s ir.Shape, axis int) (int, error) {
	if axis < 0 {
		axis += len(s) + 1
	}
	if axis < 0 || axis > len(s) {
		return 0, Errorf("axis %d is out of range for stacking inputs of shape %v (0 to %d, or -%d to -1)", axis, s, len(s), len(s)+1)
	}
	return axis, nil
}

// RowAxis normalizes a possibly negative axis of s and checks its range.
func RowAxis(s ir.Shape, axis int) (int, error) {
	if axis < 0 {
		axis += len(s)
	}
	if axis < 0 || axis >= len(s) {
		return 0, Errorf("axis %d is out of range for shape %v", axis, s)
	}
	return axis, nil
}
