package ops

import (
	"fmt"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/tensor"
)

// lookup_table gathers embedding rows by integer id; its gradient is a row
// gradient (row-sparse): the output gradient's rows summed per id.

func init() {
	register(&Def{
		Name: "lookup_table", Doc: "y[..., :] = table[ids[...], :] for table [V, D] and int32 ids of any shape; y is ids' shape + [D]",
		Inputs: []string{"table", "ids"}, Outputs: []string{"y"},
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			if err := checkTableIDs(in[0], in[1]); err != nil {
				return nil, err
			}
			out := append(in[1].Shape.Clone(), in[0].Shape[1])
			return []Type{{DType: ir.F32, Shape: out}}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("lookup_table_grad", []string{g.OutGrads[0], g.Inputs[1], g.Inputs[0]}, nil), ""}
		},
		SparseIn: true,
		Kernel: func(k KernelArgs) (Kernel, error) {
			table, ids, y := k.In[0], k.In[1], k.Out[0]
			v, d := table.Shape[0], table.Shape[1]
			if table.Rows != nil {
				return lookupFetched(table, ids, y), nil
			}
			return func(Runtime) error {
				for i, id := range ids.I {
					if id < 0 || int(id) >= v {
						return idRange(i, id, v, ids.Shape)
					}
					copy(y.F[i*d:(i+1)*d], table.F[int(id)*d:(int(id)+1)*d])
				}
				return nil
			}, nil
		},
	}, &Def{
		Name: "lookup_table_grad", Doc: "dtable = the row gradient of table: the rows of dy summed by id, each id once (row-sparse)", Internal: true,
		Inputs: []string{"dy", "ids", "table"}, Outputs: []string{"dtable"},
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			dy, ids, table := in[0], in[1], in[2]
			if err := checkTableIDs(table, ids); err != nil {
				return nil, err
			}
			want := append(ids.Shape.Clone(), table.Shape[1])
			if dy.DType != ir.F32 || !dy.Shape.Equal(want) {
				return nil, Errorf("dy must be float32 %v (ids %v + [D] of table %v), got %v", want, ids.Shape, table.Shape, dy)
			}
			if table.Sparse() { // the fetched rows of a sharded table: its row set
				return []Type{{DType: ir.F32, Shape: table.Shape.Clone(), RowSet: table.RowSet, MaxRows: table.MaxRows}}, nil
			}
			return []Type{newRows(table.Shape, ids.Shape.Numel())}, nil
		},
		SparseIn: true,
		Kernel: func(k KernelArgs) (Kernel, error) {
			if k.In[2].Rows != nil {
				return addFetched(k.In[0], k.In[1], k.Out[0]), nil
			}
			return scatterAddRows(k.In[0], k.In[1], k.Out[0]), nil
		},
	})
}

// lookupFetched is lookup_table from the rows a trainer fetched of a
// sharded table (fetch_rows): every id of the batch is among them.
func lookupFetched(rows, ids, y *tensor.Tensor) Kernel {
	d := rows.RowWidth()
	return func(Runtime) error {
		for i, id := range ids.I {
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

func checkTableIDs(table, ids Type) error {
	if table.DType != ir.F32 || len(table.Shape) != 2 {
		return Errorf("table must be float32 [V, D], got %v", table)
	}
	if ids.DType != ir.I32 {
		return Errorf("ids must be int32, got %v", ids)
	}
	return nil
}

func idRange(flat int, id int32, v int, shape ir.Shape) error {
	return fmt.Errorf("id %d at flat position %d of ids %v is outside [0, %d): the table has %d rows", id, flat, shape, v, v)
}
