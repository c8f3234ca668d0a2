package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// Ops the built-in optimizers need beyond the element-wise arithmetic:
// pow (FTRL's accumulator^-lr_power) and row_mean (row-wise adagrad's mean
// of g² over each row of a table, which runs on a row gradient's rows).

func init() {
	register(&Def{
		Name: "pow", Doc: "y = x^exponent element-wise (math.Pow: NaN for x < 0 and a non-integer exponent; x^0.5 is sqrt(x) bit for bit)",
		Inputs: []string{"x"}, Outputs: []string{"y"},
		Attrs: []AttrSpec{{Name: "exponent", Kind: AttrFloat, Required: true, Doc: "the power"}},
		Infer: inferSameF32,
		Grad: func(b GradBuilder, g GradArgs) []string {
			// dx = dy * exponent * x^(exponent - 1)
			p := g.Attrs.Float("exponent")
			d := b.Emit("scale", []string{b.Emit("pow", []string{g.Inputs[0]}, Attrs{"exponent": p - 1})}, Attrs{"factor": p})
			return []string{b.Emit("mul", []string{g.OutGrads[0], d}, nil)}
		},
		ElementWise: true,
	})
	register(&Def{
		Name: "row_mean", Doc: "y[i] = the mean of row i of x (every element x[i, ...]); y has x's rank, every dimension after the first 1 ([N, D] -> [N, 1]); on a row-sparse x, the rows it holds",
		Inputs: []string{"x"}, Outputs: []string{"y"},
		// It reads each row alone, so it runs on the rows of a row
		// gradient (an optimizer's state of one value per table row).
		SparseIn: true,
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			x := in[0]
			if x.DType != ir.F32 {
				return nil, Errorf("x must be float32, got %v", x)
			}
			out := Type{DType: ir.F32, Shape: RowMeanShape(x.Shape), RowSet: x.RowSet, MaxRows: x.MaxRows}
			return []Type{out}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			// dx[i, ...] = dy[i] / (elements of a row)
			return []string{b.Emit("row_mean_grad", []string{g.OutGrads[0], g.Inputs[0]}, nil)}
		},
	}, &Def{
		Name: "row_mean_grad", Doc: "dx = dy broadcast along each row of x, divided by the number of elements in a row", Internal: true,
		Inputs: []string{"dy", "x"}, Outputs: []string{"dx"},
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			if want := RowMeanShape(in[1].Shape); !in[0].Shape.Equal(want) {
				return nil, Errorf("dy %v must have the shape of the row means of x %v, %v", in[0].Shape, in[1].Shape, want)
			}
			return []Type{{DType: ir.F32, Shape: in[1].Shape.Clone()}}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("row_mean", []string{g.OutGrads[0]}, nil), ""}
		},
	})
}

// RowMeanShape is the shape of row_mean's output for an input of shape
// s: s with every dimension after the first set to 1 (a scalar stays a
// scalar, a vector keeps its shape: each element is a row).
func RowMeanShape(s ir.Shape) ir.Shape {
	out := s.Clone()
	for i := 1; i < len(out); i++ {
		out[i] = 1
	}
	return out
}
