package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// A dynamic table (params.P.dynamic, issue 23) lives in an
// exec/dyntable.Table, not in a tensor: dsl.LowerDynamic rewrites a
// graph's reads and updates of it into these ops. dyn_pull finds (and
// admits) the batch's distinct keys and outputs their rows, row-sparse
// with rows 0..n-1 in the order the keys were first met; dyn_pos gives
// each key of one ids input its row there (the lookups and their
// gradients read the pulled rows through it, as a sharded table's
// fetched rows); dyn_gather reads columns (the value or one optimizer
// state) of the rows a row gradient holds, and dyn_scatter writes the
// optimizer's new columns back. Keys without a row read the table's
// default and their gradient is dropped.

func init() {
	attrDim := AttrSpec{Name: "dim", Kind: AttrInt, Required: true, Doc: "the row width of the table"}
	register(&Def{
		Name: "dyn_pull", Doc: "finds the distinct keys of the inputs (int64; padding skipped) in dynamic table `var`, counting their sightings and admitting keys, and outputs their rows (row-sparse, rows 0..n-1 in order of first sight)", Internal: true,
		Outputs: []string{"rows"}, MinInputs: 1, MaxInputs: -1,
		Attrs: []AttrSpec{attrVar, attrDim},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if a.Int("dim") < 1 {
				return nil, Errorf("dim must be at least 1, got %d", a.Int("dim"))
			}
			n := 0
			for i, t := range in {
				if t.DType != ir.I64 || t.Sparse() {
					return nil, Errorf("input %d must be int64 keys, got %v", i, t)
				}
				n += t.Shape.Numel()
			}
			return []Type{newRows(ir.Shape{ir.DynamicRows, a.Int("dim")}, n)}, nil
		},
		Stateful: true,
	}, &Def{
		Name: "dyn_pos", Doc: "pos[...] = the row of rows (dyn_pull's output) holding the key ids[...]; padding keys get -1", Internal: true,
		Inputs: []string{"rows", "ids"}, Outputs: []string{"pos"},
		Attrs:    []AttrSpec{attrVar},
		SparseIn: true,
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			if !in[0].Sparse() {
				return nil, Errorf("rows must be dyn_pull's row-sparse output, got %v", in[0])
			}
			if in[1].DType != ir.I64 || in[1].Sparse() {
				return nil, Errorf("ids must be int64 keys, got %v", in[1])
			}
			return []Type{{DType: ir.I32, Shape: in[1].Shape.Clone()}}, nil
		},
	}, &Def{
		Name: "dyn_gather", Doc: "y = columns [col, col+width) of dynamic table `var`'s rows that the row gradient rows holds (row-sparse, with rows' rows)", Internal: true,
		Inputs: []string{"rows"}, Outputs: []string{"y"},
		Attrs: []AttrSpec{attrVar,
			{Name: "col", Kind: AttrInt, Required: true, Doc: "the first column: 0 for the value, dim + offset for a state"},
			{Name: "width", Kind: AttrInt, Required: true, Doc: "the columns read"}},
		SparseIn: true,
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			r := in[0]
			if !r.Sparse() {
				return nil, Errorf("rows must be a row gradient of the table, got dense %v", r)
			}
			if a.Int("col") < 0 || a.Int("width") < 1 {
				return nil, Errorf("col %d, width %d: want col >= 0 and width >= 1", a.Int("col"), a.Int("width"))
			}
			return []Type{{DType: ir.F32, Shape: ir.Shape{ir.DynamicRows, a.Int("width")}, RowSet: r.RowSet, MaxRows: r.MaxRows}}, nil
		},
	}, &Def{
		Name: "dyn_scatter", Doc: "writes the row-sparse inputs (as many as cols) into columns cols[i].. of dynamic table `var`'s rows, dropping keys without a row; further inputs only order it after what reads the table", Internal: true,
		Outputs: []string{}, MinInputs: 1, MaxInputs: -1,
		Attrs: []AttrSpec{attrVar,
			{Name: "cols", Kind: AttrInts, Required: true, Doc: "the first column each input writes"}},
		SparseIn: true,
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			cols := a.Ints("cols")
			if len(cols) < 1 || len(cols) > len(in) {
				return nil, Errorf("%d cols for %d inputs", len(cols), len(in))
			}
			for i := range cols {
				if !in[i].Sparse() || in[i].DType != ir.F32 {
					return nil, Errorf("input %d must be row-sparse float32 rows of the table, got %v", i, in[i])
				}
				if in[i].RowSet != in[0].RowSet {
					return nil, Errorf("input %d holds the rows of %s, input 0 those of %s; every input writes the same rows", i, in[i].RowSet, in[0].RowSet)
				}
			}
			return []Type{}, nil
		},
		Stateful: true,
	}, &Def{
		Name: "dyn_serve", Transfer: true, On: ir.PServerRole, Doc: "a pserver's serve_rows of its shard of dynamic table `var`: answers each trainer's distinct keys and their counts (transfer `transfer`@ids) with their rows (`transfer`@rows), counting the sightings and admitting keys once every request of the step was counted (sync)", Internal: true,
		Outputs: []string{},
		Attrs:   serveAttrs(),
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if err := checkServeAttrs(a); err != nil {
				return nil, err
			}
			return []Type{}, nil
		},
		Blocking: true, Stateful: true,
	}, &Def{
		Name: "dyn_accumulate", Transfer: true, On: ir.PServerRole, Doc: "a pserver's accumulate_rows of its shard of dynamic table `var`: blocks until `count` row gradients by key (transfer `transfer`) arrived, checks every piece before merging any, and outputs their mean by key (rows are positions in the step's keys, whose slots dyn_gather and dyn_scatter read)", Internal: true,
		Outputs: []string{"g"},
		Attrs:   serveAttrs(),
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if err := checkServeAttrs(a); err != nil {
				return nil, err
			}
			return []Type{newRows(ir.Shape{ir.DynamicRows, a.Int("dim")}, a.Int("count")*a.Int("max_rows"))}, nil
		},
		Blocking: true,
	})
}

// serveAttrs are the attributes of dyn_serve and dyn_accumulate.
func serveAttrs() []AttrSpec {
	return []AttrSpec{attrVar,
		{Name: "transfer", Kind: AttrString, Required: true, Doc: "the transfer's name (the table's, or its gradient's)"},
		{Name: "count", Kind: AttrInt, Required: true, Doc: "requests or pieces per step: the trainer count in sync mode, 1 in async mode"},
		{Name: "max_rows", Kind: AttrInt, Required: true, Doc: "the most keys one request or piece holds"},
		{Name: "dim", Kind: AttrInt, Required: true, Doc: "the row width"},
		{Name: "shard", Kind: AttrInt, Required: true, Doc: "this shard's index: it holds the keys k with dyntable.ShardOf(k, shards) == shard"},
		{Name: "shards", Kind: AttrInt, Required: true, Doc: "the shards of the table"}}
}

func checkServeAttrs(a Attrs) error {
	if a.Int("count") < 1 || a.Int("max_rows") < 1 || a.Int("dim") < 1 {
		return Errorf("count, max_rows and dim must be at least 1")
	}
	if a.Int("shard") < 0 || a.Int("shard") >= a.Int("shards") {
		return Errorf("shard %d of %d: want 0 <= shard < shards", a.Int("shard"), a.Int("shards"))
	}
	return nil
}
