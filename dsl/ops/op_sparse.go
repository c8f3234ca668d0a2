package ops

import (
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
			if x.DType != tensor.F32 || len(x.Shape) == 0 || x.Shape[0] != r.Shape[0] {
				return nil, Errorf("x must be float32 with %d rows (rows' height), got %v", r.Shape[0], x)
			}
			return []Type{{DType: tensor.F32, Shape: x.Shape.Clone(), RowSet: r.RowSet, MaxRows: r.MaxRows}}, nil
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
			w := z.RowWidth()
			idx := newRowIndex(cap(z.Rows.IDs))
			return func(Runtime) error {
				idx.reset()
				rows := z.Rows.IDs[:0]
				z.F = z.F[:0]
				for _, src := range [2]*tensor.Tensor{x, y} {
					for i, r := range src.Rows.IDs {
						slot, fresh := idx.slot(r, len(rows))
						v := src.F[i*w : (i+1)*w]
						if fresh {
							rows = append(rows, r)
							z.F = append(z.F, v...)
							continue
						}
						acc := z.F[slot*w : (slot+1)*w]
						for j, a := range v {
							acc[j] += a
						}
					}
				}
				z.Rows.IDs = rows
				return nil
			}, nil
		},
	})
}

// newRows is the type of a row-sparse value that holds rows of its own
// (inferOp names the row set after the op's output).
func newRows(shape tensor.Shape, maxRows int) Type {
	return Type{DType: tensor.F32, Shape: shape.Clone(), MaxRows: max(1, min(maxRows, shape[0]))}
}

// rowIndex maps row ids to their slot in a row-sparse value: open
// addressing over a power-of-two table at most half full, cleared in time
// proportional to the rows it holds, so a step allocates nothing.
type rowIndex struct {
	keys  []int32 // row id + 1; 0 is empty
	slots []int32
	used  []int32 // buckets in use, for reset
	mask  uint32
}

func newRowIndex(maxRows int) *rowIndex {
	n := 16
	for n < 2*maxRows {
		n *= 2
	}
	return &rowIndex{keys: make([]int32, n), slots: make([]int32, n), used: make([]int32, 0, maxRows), mask: uint32(n - 1)}
}

func (x *rowIndex) reset() {
	for _, b := range x.used {
		x.keys[b] = 0
	}
	x.used = x.used[:0]
}

// slot returns the slot of row r, adding it at slot next if absent (fresh).
func (x *rowIndex) slot(r int32, next int) (slot int, fresh bool) {
	b := (uint32(r) * 0x9E3779B1) & x.mask
	for {
		switch x.keys[b] {
		case r + 1:
			return int(x.slots[b]), false
		case 0:
			x.keys[b], x.slots[b] = r+1, int32(next)
			x.used = append(x.used, int32(b))
			return next, true
		}
		b = (b + 1) & x.mask
	}
}

// find returns the slot of row r, or -1.
func (x *rowIndex) find(r int32) int {
	b := (uint32(r) * 0x9E3779B1) & x.mask
	for {
		switch x.keys[b] {
		case r + 1:
			return int(x.slots[b])
		case 0:
			return -1
		}
		b = (b + 1) & x.mask
	}
}

// scatterAddRows is lookup_table_grad's kernel: the rows of dy summed by
// id, each id once, in order of first appearance.
func scatterAddRows(dy, ids, dt *tensor.Tensor) Kernel {
	v, d := dt.Shape[0], dt.RowWidth()
	idx := newRowIndex(cap(dt.Rows.IDs))
	return func(Runtime) error {
		idx.reset()
		rows := dt.Rows.IDs[:0]
		dt.F = dt.F[:0]
		for i, id := range ids.I {
			if id < 0 || int(id) >= v {
				return idRange(i, id, v, ids.Shape)
			}
			src := dy.F[i*d : (i+1)*d]
			slot, fresh := idx.slot(id, len(rows))
			if fresh {
				rows = append(rows, id)
				dt.F = append(dt.F, src...)
				continue
			}
			acc := dt.F[slot*d : (slot+1)*d]
			for j, x := range src {
				acc[j] += x
			}
		}
		dt.Rows.IDs = rows
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
