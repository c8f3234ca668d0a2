package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
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
		SparseIn: true, ReadsTable: true,
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
			return []Type{tableRowGrad(table, ids)}, nil
		},
		SparseIn: true, RowGrad: true,
	})
}

func checkTableIDs(table, ids Type) error {
	if table.DType != ir.F32 || len(table.Shape) != 2 {
		return Errorf("table must be float32 [V, D], got %v", table)
	}
	if table.Shape[0] == ir.DynamicRows && !table.Sparse() {
		if ids.DType != ir.I64 {
			return Errorf("table %v is dynamic: its rows are found by 64-bit key, so ids must be int64 keys (an ids spec with key: hash64 or key: int64, or hash_cross with dtype: int64), got %v", table.Shape, ids)
		}
		return nil
	}
	if ids.DType == ir.I64 {
		return Errorf("ids are 64-bit keys (%v), but a table [V, D] is read by int32 ids in [0, V): read the column with hash_buckets: V instead of key, or map the keys onto the rows with hash_cross (buckets: V)", ids)
	}
	if ids.DType != ir.I32 {
		return Errorf("ids must be int32, got %v", ids)
	}
	return nil
}

// tableRowGrad is the type of the row gradient of table through a lookup
// of ids: at most one row per id, or for the fetched rows of a sharded
// table (a row-sparse value) the rows fetched.
func tableRowGrad(table, ids Type) Type {
	if table.Sparse() {
		return Type{DType: ir.F32, Shape: table.Shape.Clone(), RowSet: table.RowSet, MaxRows: table.MaxRows}
	}
	return newRows(table.Shape, ids.Shape.Numel())
}
