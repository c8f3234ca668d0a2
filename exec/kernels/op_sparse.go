package kernels

import (
	"github.com/psgraph/psgraph/exec/tensor"
)

// Row-sparse values: gather_rows, to_dense, sparse_add, and the assign of
// a row-sparse value (ScatterRows).

func init() {
	register("gather_rows", func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		w := y.RowWidth()
		return func(Runtime) error {
			y.Fit()
			gatherRows(y.F, x.F, y.Rows.IDs, w)
			return nil
		}, nil
	})
	register("to_dense", func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		w := x.RowWidth()
		return func(Runtime) error {
			clear(y.F)
			for i, r := range x.Rows.IDs {
				copy(y.F[int(r)*w:(int(r)+1)*w], x.F[i*w:(i+1)*w])
			}
			return nil
		}, nil
	})
	register("sparse_add", func(k Args) (Kernel, error) {
		x, y, z := k.In[0], k.In[1], k.Out[0]
		return func(Runtime) error {
			z.Rows.Reset()
			z.F = z.F[:0]
			addRows(z, x.Rows.IDs, x.F)
			addRows(z, y.Rows.IDs, y.F)
			return nil
		}, nil
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
	scatterRows(t.F, rows.F, rows.Rows.IDs, rows.RowWidth())
}
