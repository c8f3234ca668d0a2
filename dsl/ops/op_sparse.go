package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// Row-sparse values (see Type): the gradient of lookup_table lists only the
// rows a batch touched, each once, and an optimizer applied to a table runs
// on those rows only. gather_rows reads the same rows of a dense tensor
// (the table itself, its optimizer state), element-wise ops combine values
// with the same rows, and an assign of a row-sparse value writes just its
// rows into the persistent variable. to_dense is the explicit way back.
// Row-sparse values only arise as gradients, so these ops have no
// gradient rules of their own.

func init() {
	register(&Def{
		Name: "gather_rows", Doc: "y = the rows of x that the row-sparse value rows holds (row-sparse, with rows' rows)",
		Inputs: []string{"x", "rows"}, Outputs: []string{"y"},
		SparseIn: true,
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			x, r := in[0], in[1]
			if x.Sparse() {
				return nil, Errorf("x must be dense, got %v", x)
			}
			if !r.Sparse() {
				return nil, Errorf("rows must be a row-sparse value (a row gradient), got dense %v", r)
			}
			if x.DType != ir.F32 || len(x.Shape) == 0 || x.Shape[0] != r.Shape[0] {
				return nil, Errorf("x must be float32 with %d rows (rows' height), got %v", r.Shape[0], x)
			}
			return []Type{{DType: ir.F32, Shape: x.Shape.Clone(), RowSet: r.RowSet, MaxRows: r.MaxRows}}, nil
		},
	}, &Def{
		Name: "to_dense", Doc: "y = x as a dense tensor: its rows where x holds them, zeros elsewhere",
		Inputs: []string{"x"}, Outputs: []string{"y"},
		SparseIn: true,
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			if !in[0].Sparse() {
				return nil, Errorf("x is already dense (%v); to_dense takes a row-sparse value", in[0])
			}
			return []Type{{DType: in[0].DType, Shape: in[0].Shape.Clone()}}, nil
		},
	}, &Def{
		Name: "sparse_add", Doc: "z = x + y for row-sparse x and y holding different rows: z holds the union of their rows", Internal: true,
		Inputs: []string{"x", "y"}, Outputs: []string{"z"},
		SparseIn: true,
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			x, y := in[0], in[1]
			if !x.Sparse() || !y.Sparse() || x.DType != y.DType || !x.Shape.Equal(y.Shape) {
				return nil, Errorf("x and y must be row-sparse values of one shape, got %v and %v", x, y)
			}
			return []Type{newRows(x.Shape, x.MaxRows+y.MaxRows)}, nil
		},
	})
}

// newRows is the type of a row-sparse value that holds rows of its own
// (inferOp names the row set after the op's output).
func newRows(shape ir.Shape, maxRows int) Type {
	return Type{DType: ir.F32, Shape: shape.Clone(), MaxRows: max(1, min(maxRows, shape[0]))}
}
