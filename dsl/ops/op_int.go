package ops

import (
	"math"

	"github.com/psgraph/psgraph/dsl/ir"
)

// Integer ops: cast between float32, int32 and int64, hash_cross
// (feature crosses of id columns hashed into a bucket space, or into
// 64-bit keys) and arange_like (0..n-1 along an axis of a tensor: the
// labels of in-batch negatives). Ids are int32 (ids of a fixed table) or
// int64 (64-bit feature keys); in this file the helpers below are the one
// place that says so.

// isID reports whether t holds integer ids: int32 ids or int64 keys.
func isID(t Type) bool { return t.DType == ir.I32 || t.DType == ir.I64 }

// idType is the type of int32 ids of the given shape.
func idType(shape ir.Shape) Type { return Type{DType: ir.I32, Shape: shape} }

// castable are the dtypes cast converts between.
func castable(d ir.DType) bool { return d == ir.F32 || d == ir.I32 || d == ir.I64 }

func init() {
	register(&Def{
		Name: "cast", Doc: "y = x converted to dtype `to`: int32 or int64 to float32 rounding to nearest (exact up to 2^24), float32 to int32 or int64 rounding toward zero, int32 to int64 exactly, int64 to int32 when the value fits (a value outside the target's range, or NaN, stops the run); not differentiable",
		Inputs: []string{"x"}, Outputs: []string{"y"},
		Attrs: []AttrSpec{{Name: "to", Kind: AttrString, Required: true, Doc: "float32, int32 or int64"}},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			to, ok := ir.ParseDType(a.String("to"))
			if !ok {
				return nil, Errorf("to: %q is not a dtype; write float32, int32 or int64", a.String("to"))
			}
			if to == in[0].DType {
				return nil, Errorf("x is already %v: nothing to cast (use identity for a copy)", in[0])
			}
			if !castable(in[0].DType) || in[0].Sparse() {
				return nil, Errorf("x must be float32, int32 or int64, got %v", in[0])
			}
			return []Type{{DType: to, Shape: in[0].Shape.Clone()}}, nil
		},
	}, &Def{
		Name: "hash_cross", Doc: "y[i] = the crossed id of row i: every value of row i of the inputs (int32 ids or int64 keys [N] or [N, k], in input order, a row's values in column order) hashed together into [0, buckets), or with dtype: int64 into a 64-bit key (docs/dsl.md: the hash); not differentiable",
		Inputs: []string{"ids..."}, Outputs: []string{"y"}, MinInputs: 1, MaxInputs: -1,
		Attrs: []AttrSpec{
			{Name: "buckets", Kind: AttrInt, Doc: "the size of the id space, 1 to 2^31-1: required for int32 ids, absent with dtype: int64"},
			{Name: "salt", Kind: AttrInt, Default: 0, Doc: "mixed in first: crosses that share a table and should not share ids take different salts"},
			{Name: "dtype", Kind: AttrString, Default: "int32", Doc: "int32: ids in [0, buckets); int64: the whole 64-bit hash as a key (no buckets), for a table indexed by 64-bit keys"},
		},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			out := ir.I32
			switch dt := a.String("dtype"); dt {
			case "int32", "i32":
				if !a.Has("buckets") {
					return nil, Errorf("buckets is required: the size of the id space [0, buckets), 1 to 2^31-1 (or dtype: int64 for a 64-bit key without buckets)")
				}
				if n := a.Int("buckets"); n < 1 || n > math.MaxInt32 {
					return nil, Errorf("buckets %d is outside [1, 2^31-1]", n)
				}
			case "int64", "i64":
				if a.Has("buckets") {
					return nil, Errorf("buckets %d with dtype: int64: an int64 cross is the whole 64-bit hash, with no bucket space; remove buckets (or dtype, for int32 ids in [0, buckets))", a.Int("buckets"))
				}
				out = ir.I64
			default:
				return nil, Errorf("dtype %q is not int32 (ids in [0, buckets)) or int64 (64-bit keys)", dt)
			}
			rows := -1
			for i, t := range in {
				if !isID(t) || t.Sparse() || len(t.Shape) < 1 || len(t.Shape) > 2 {
					return nil, Errorf("input %d must be int32 ids or int64 keys [batch] or [batch, k], got %v", i, t)
				}
				if rows >= 0 && t.Shape[0] != rows {
					return nil, Errorf("input %d has %d rows, input 0 has %d: the inputs must have one row per example", i, t.Shape[0], rows)
				}
				rows = t.Shape[0]
			}
			return []Type{{DType: out, Shape: ir.Shape{rows}}}, nil
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
