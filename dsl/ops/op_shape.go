package ops

import (
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/dsl/ir"
)

// reshape and transpose rearrange a tensor without changing its elements.
// reshape's gradient is reshape_like, which takes the target shape from a
// variable instead of an attribute, so a backward pass generated at one
// batch size still checks at another.

func init() {
	register(&Def{
		Name: "reshape", Doc: "y = x with the dimensions `shape` (same elements, row-major order)", View: true,
		Inputs: []string{"x"}, Outputs: []string{"y"},
		Attrs: []AttrSpec{{Name: "shape", Kind: AttrInts, Required: true, Doc: "dimensions of y; -1 is the batch"}},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			s := ir.Shape(a.Ints("shape")).Clone()
			for _, d := range s {
				if d <= 0 {
					return nil, Errorf("shape %v: dimensions must be positive (-1 for the batch)", s)
				}
			}
			if n, m := in[0].Shape.Numel(), s.Numel(); n != m {
				return nil, Errorf("cannot reshape %v (%d elements) to %v (%d elements)", in[0].Shape, n, s, m)
			}
			return []Type{{DType: in[0].DType, Shape: s}}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("reshape_like", []string{g.OutGrads[0], g.Inputs[0]}, nil)}
		},
	}, &Def{
		Name: "reshape_like", Doc: "y = x with the shape of like (same elements, row-major order)", Internal: true, View: true,
		Inputs: []string{"x", "like"}, Outputs: []string{"y"},
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			if n, m := in[0].Shape.Numel(), in[1].Shape.Numel(); n != m {
				return nil, Errorf("cannot reshape %v (%d elements) to %v (%d elements)", in[0].Shape, n, in[1].Shape, m)
			}
			return []Type{{DType: in[0].DType, Shape: in[1].Shape.Clone()}}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("reshape_like", []string{g.OutGrads[0], g.Inputs[0]}, nil), ""}
		},
	}, &Def{
		Name: "transpose", Doc: "y = x with its axes permuted: y's axis i is x's axis perm[i]",
		Inputs: []string{"x"}, Outputs: []string{"y"},
		Attrs: []AttrSpec{{Name: "perm", Kind: AttrInts, Doc: "a permutation of the axes; absent: reverse them"}},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			x := in[0].Shape
			perm, err := PermOf(a, len(x))
			if err != nil {
				return nil, Errorf("%v for input %v", err, x)
			}
			out := make(ir.Shape, len(x))
			for i, p := range perm {
				out[i] = x[p]
			}
			return []Type{{DType: in[0].DType, Shape: out}}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			perm, _ := PermOf(g.Attrs, len(b.Type(g.Inputs[0]).Shape))
			inv := make([]int, len(perm))
			for i, p := range perm {
				inv[p] = i
			}
			return []string{b.Emit("transpose", []string{g.OutGrads[0]}, Attrs{"perm": inv})}
		},
	})
}

// PermOf returns the perm attribute, or the reversed axes when it is absent.
func PermOf(a Attrs, rank int) ([]int, error) {
	if !a.Has("perm") {
		p := make([]int, rank)
		for i := range p {
			p[i] = rank - 1 - i
		}
		return p, nil
	}
	p := a.Ints("perm")
	seen := make([]bool, rank)
	ok := len(p) == rank
	for _, v := range p {
		if !ok || v < 0 || v >= rank || seen[v] {
			ok = false
			break
		}
		seen[v] = true
	}
	if !ok {
		return nil, Errorf("perm %s is not a permutation of the %d axes [0, %d)", intList(p), rank, rank)
	}
	return p, nil
}

// intList formats ints like shapes are formatted: [1, 0, 2].
func intList(v []int) string {
	parts := make([]string, len(v))
	for i, d := range v {
		parts[i] = strconv.Itoa(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
