package ops

import (
	"math"

	"github.com/psgraph/psgraph/dsl/ir"
)

// Integer ops: cast between int32 and float32, hash_cross (feature crosses
// of id columns hashed into a bucket space) and arange_like (0..n-1 along
// an axis of a tensor: the labels of in-batch negatives). Ids are int32;
// in this file the helpers below are the one place that says so.

// isID reports whether t holds integer ids.
func isID(t Type) bool { return t.DType == ir.I32 }

// idType is the type of ids of the given shape.
func idType(shape ir.Shape) Type { return Type{DType: ir.I32, Shape: shape} }

func init() {
	register(&Def{
		Name: "cast", Doc: "y = x converted to dtype `to`: int32 to float32 exactly (up to 2^24), float32 to int32 rounding toward zero (a value outside int32, or NaN, stops the run); not differentiable",
		Inputs: []string{"x"}, Outputs: []string{"y"},
		Attrs: []AttrSpec{{Name: "to", Kind: AttrString, Required: true, Doc: "int32 or float32"}},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			to, ok := ir.ParseDType(a.String("to"))
			if !ok {
				return nil, Errorf("to: %q is not a dtype; write int32 or float32", a.String("to"))
			}
			if to == in[0].DType {
				return nil, Errorf("x is already %v: nothing to cast (use identity for a copy)", in[0])
			}
			return []Type{{DType: to, Shape: in[0].Shape.Clone()}}, nil
		},
	}, &Def{
		Name: "hash_cross", Doc: "y[i] = the crossed id of row i: every value of row i of the inputs (ids [N] or [N, k], in input order, a row's values in column order) hashed together into [0, buckets) (docs/dsl.md: the hash); not differentiable",
		Inputs: []string{"ids..."}, Outputs: []string{"y"}, MinInputs: 1, MaxInputs: -1,
		Attrs: []AttrSpec{
			{Name: "buckets", Kind: AttrInt, Required: true, Doc: "the size of the id space, 1 to 2^31-1"},
			{Name: "salt", Kind: AttrInt, Default: 0, Doc: "mixed in first: crosses that share a table and should not share ids take different salts"},
		},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if n := a.Int("buckets"); n < 1 || n > math.MaxInt32 {
				return nil, Errorf("buckets %d is outside [1, 2^31-1]", n)
			}
			rows := -1
			for i, t := range in {
				if !isID(t) || len(t.Shape) < 1 || len(t.Shape) > 2 {
					return nil, Errorf("input %d must be int32 ids [batch] or [batch, k], got %v", i, t)
				}
				if rows >= 0 && t.Shape[0] != rows {
					return nil, Errorf("input %d has %d rows, input 0 has %d: the inputs must have one row per example", i, t.Shape[0], rows)
				}
				rows = t.Shape[0]
			}
			return []Type{idType(ir.Shape{rows})}, nil
		},
	}, &Def{
		Name: "arange_like", Doc: "y = int32 [0, 1, ..., n-1], n the size of x along axis (default 0: the batch): the labels of in-batch negatives; not differentiable",
		Inputs: []string{"x"}, Outputs: []string{"y"},
		Attrs: []AttrSpec{{Name: "axis", Kind: AttrInt, Default: 0, Doc: "the axis of x whose size y takes (negative counts from the end)"}},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			ax, err := RowAxis(in[0].Shape, a.Int("axis"))
			if err != nil {
				return nil, err
			}
			return []Type{idType(ir.Shape{in[0].Shape[ax]})}, nil
		},
	})
}
