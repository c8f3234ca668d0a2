package kernels

import (
	"fmt"

	"github.com/psgraph/psgraph/exec/tensor"
)

// lookup_table and its row-sparse gradient.

func init() {
	register("lookup_table", func(k Args) (Kernel, error) {
		table, ids, y := k.In[0], k.In[1], k.Out[0]
		v, d := table.Shape[0], table.Shape[1]
		if table.Rows != nil {
			return lookupFetched(table, ids, y), nil
		}
		return func(rt Runtime) error {
			for i, id := range ids.I {
				if id < 0 || int(id) >= v {
					return idRange(i, id, v, ids.Shape)
				}
			}
			if l := rt.TableReads(); l != nil {
				l.Lock()
				defer l.Unlock()
			}
			gatherRows(y.F, table.F, ids.I, d)
			return nil
		}, nil
	})
	register("lookup_table_grad", func(k Args) (Kernel, error) {
		if k.In[2].Rows != nil {
			return addFetched(k.In[0], k.In[1], k.Out[0]), nil
		}
		return scatterAddRows(k.In[0], k.In[1], k.Out[0]), nil
	})
}

// lookupFetched is lookup_table from the rows a trainer fetched of a
// sharded table (fetch_rows): every id of the batch is among them.
func lookupFetched(rows, ids, y *tensor.Tensor) Kernel {
	d := rows.RowWidth()
	return func(Runtime) error {
		for i, id := range ids.I {
			if id < 0 {
				return idRange(i, id, rows.Shape[0], ids.Shape)
			}
			slot := rows.Rows.Slot(id)
			if slot < 0 {
				return fmt.Errorf("id %d at flat position %d of ids %v was not fetched; look it up through the fetch_rows of its table", id, i, ids.Shape)
			}
			copy(y.F[i*d:(i+1)*d], rows.F[slot*d:(slot+1)*d])
		}
		return nil
	}
}

// addFetched is lookup_table_grad into the rows a trainer fetched: the
// gradient holds exactly those rows (zero where this lookup has none).
func addFetched(dy, ids, g *tensor.Tensor) Kernel {
	d := g.RowWidth()
	return func(Runtime) error {
		g.Fit()
		clear(g.F)
		for i, id := range ids.I {
			if id < 0 {
				return idRange(i, id, g.Shape[0], ids.Shape)
			}
			slot := g.Rows.Slot(id)
			if slot < 0 {
				return fmt.Errorf("id %d at flat position %d of ids %v was not fetched; look it up through the fetch_rows of its table", id, i, ids.Shape)
			}
			acc, src := g.F[slot*d:(slot+1)*d], dy.F[i*d:(i+1)*d]
			for j, x := range src {
				acc[j] += x
			}
		}
		return nil
	}
}

func idRange(flat int, id int32, v int, shape tensor.Shape) error {
	return fmt.Errorf("id %d at flat position %d of ids %v is outside [0, %d): the table has %d rows", id, flat, shape, v, v)
}
