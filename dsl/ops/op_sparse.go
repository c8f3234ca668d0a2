package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/tensor"
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
		Kernel: func(k KernelArgs) (Kernel, error) {
			x, y := k.In[0], k.Out[0]
			w := y.RowWidth()
			return func(Runtime) error {
				y.Fit()
				for i, r := range y.Rows.IDs {
					copy(y.F[i*w:(i+1)*w], x.F[int(r)*w:(int(r)+1)*w])
				}
				return nil
			}, nil
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
		Kernel: func(k KernelArgs) (Kernel, error) {
			x, y := k.In[0], k.Out[0]
			w := x.RowWidth()
			return func(Runtime) error {
				clear(y.F)
				for i, r := range x.Rows.IDs {
					copy(y.F[int(r)*w:(int(r)+1)*w], x.F[i*w:(i+1)*w])
				}
				return nil
			}, nil
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
		Kernel: func(k KernelArgs) (Kernel, error) {
			x, y, z := k.In[0], k.In[1], k.Out[0]
			return func(Runtime) error {
				z.Rows.Reset()
				z.F = z.F[:0]
				addRows(z, x.Rows.IDs, x.F)
				addRows(z, y.Rows.IDs, y.F)
				return nil
			}, nil
		},
	})
}

// addRows adds values (one row of dst's width per id) into row-sparse dst,
// appending the rows it does not hold yet.
func addRows(dst *tensor.Tensor, ids []int32, values []float32) {
	w := dst.RowWidth()
	for i, r := range ids {
		v := values[i*w : (i+1)*w]
		slot, fresh := dst.Rows.Add(r)
		if fresh {
			dst.F = append(dst.F, v...)
			continue
		}
		acc := dst.F[slot*w : (slot+1)*w]
		for j, a := range v {
			acc[j] += a
		}
	}
}

// newRows is the type of a row-sparse value that holds rows of its own
// (inferOp names the row set after the op's output).
func newRows(shape ir.Shape, maxRows int) Type {
	return Type{DType: ir.F32, Shape: shape.Clone(), MaxRows: max(1, min(maxRows, shape[0]))}
}

// scatterAddRows is lookup_table_grad's kernel: the rows of dy summed by
// id, each id once, in order of first appearance.
func scatterAddRows(dy, ids, dt *tensor.Tensor) Kernel {
	v := dt.Shape[0]
	return func(Runtime) error {
		for i, id := range ids.I {
			if id < 0 || int(id) >= v {
				return idRange(i, id, v, ids.Shape)
			}
		}
		dt.Rows.Reset()
		dt.F = dt.F[:0]
		addRows(dt, ids.I, dy.F)
		return nil
	}
}

// ScatterRows writes the rows a row-sparse value holds into dense t: the
// assign of a row-sparse next value (the rows an optimizer updated).
func ScatterRows(t, rows *tensor.Tensor) {
	w := rows.RowWidth()
	for i, r := range rows.Rows.IDs {
		copy(t.F[int(r)*w:(int(r)+1)*w], rows.F[i*w:(i+1)*w])
	}
}
