package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// A sharded lookup table (split, docs/split.md): table T [V, D] lives on M
// pservers by row, row r on pserver r mod M as its local row r div M.
// Each step a trainer's fetch_rows sends every shard the batch's unique
// ids it owns and assembles the rows they answer into a row-sparse value
// (the forward lookups and their gradients use it in place of T);
// send_rows sends each shard its part of the row gradient. On a pserver,
// serve_rows answers each trainer's ids with its rows, and
// accumulate_rows merges the trainers' row gradients into one (sync: the
// mean), which the optimizer applies to those rows. Ids travel as local
// rows, so every message is validated against the shard it reaches.

func init() {
	register(&Def{
		Name: "fetch_rows", Doc: "sends each shard of table `var` the unique ids of the inputs it owns (id mod shards), and outputs the rows they answer (row-sparse); ids < 0 are padding and not fetched. A dynamic table's (shape [dynamic, D]): int64 keys, sent with their counts to the shard dyntable.ShardOf names, the rows 0..n-1 in order of first sight (dyn_pos maps keys to them)", Internal: true,
		Outputs: []string{"rows"}, MinInputs: 1, MaxInputs: -1,
		Attrs: []AttrSpec{
			attrVar,
			{Name: "shards", Kind: AttrInt, Required: true, Doc: "the pservers the table is sharded over"},
			{Name: "shape", Kind: AttrInts, Required: true, Doc: "the whole table's shape [V, D]"},
		},
		SparseIn: true,
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			shape := ir.Shape(a.Ints("shape"))
			if len(shape) != 2 || shape[0] < 1 || shape[1] < 1 {
				return nil, Errorf("shape must be [V, D], got %v", shape)
			}
			if a.Int("shards") < 1 {
				return nil, Errorf("shards must be at least 1, got %d", a.Int("shards"))
			}
			want := ir.I32
			if shape[0] == ir.DynamicRows { // a dynamic table's: int64 keys
				want = ir.I64
			}
			n := 0
			for i, t := range in {
				if t.DType != want || t.Sparse() {
					return nil, Errorf("input %d must be %s ids, got %v", i, want, t)
				}
				n += t.Shape.Numel()
			}
			return []Type{newRows(shape, n)}, nil
		},
		Blocking: true,
	}, &Def{
		Name: "send_rows", Doc: "sends each shard of table `var` the rows of the row gradient g it owns (as local rows, with their values)", Internal: true,
		Inputs: []string{"g"}, Outputs: []string{},
		Attrs: []AttrSpec{
			attrVar,
			{Name: "shards", Kind: AttrInt, Required: true, Doc: "the pservers the table is sharded over"},
		},
		SparseIn: true,
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if !in[0].Sparse() || len(in[0].Shape) != 2 {
				return nil, Errorf("g must be a row gradient of a [V, D] table, got %v", in[0])
			}
			if a.Int("shards") < 1 {
				return nil, Errorf("shards must be at least 1, got %d", a.Int("shards"))
			}
			return []Type{}, nil
		},
		Stateful: true,
	}, &Def{
		Name: "serve_rows", Doc: "answers each trainer's ids for shard table with those rows (transfer `var`@ids in, `var`@rows out)", Internal: true,
		Inputs: []string{"table"}, Outputs: []string{},
		Attrs: []AttrSpec{
			attrVar,
			{Name: "count", Kind: AttrInt, Required: true, Doc: "requests per step: the trainer count in sync mode; 1 in async mode, where requests are served as they come until a row gradient is pending"},
			{Name: "max_rows", Kind: AttrInt, Required: true, Doc: "the most ids one request holds"},
		},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if in[0].DType != ir.F32 || len(in[0].Shape) != 2 || in[0].Sparse() {
				return nil, Errorf("table must be a dense float32 [rows, D] shard, got %v", in[0])
			}
			if a.Int("count") < 1 || a.Int("max_rows") < 1 {
				return nil, Errorf("count and max_rows must be at least 1")
			}
			return []Type{}, nil
		},
		Blocking: true, Stateful: true,
	}, &Def{
		Name: "accumulate_rows", Doc: "blocks until `count` row gradients of `var` arrived from distinct trainers, and outputs their mean as one row gradient (rows merged)", Internal: true,
		Outputs: []string{"g"},
		Attrs: []AttrSpec{
			attrVar,
			{Name: "count", Kind: AttrInt, Required: true, Doc: "pieces per step: the trainer count in sync mode, 1 in async mode"},
			{Name: "shape", Kind: AttrInts, Required: true, Doc: "the shard's shape [rows, D]"},
			{Name: "max_rows", Kind: AttrInt, Required: true, Doc: "the most rows one piece holds"},
		},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			shape := ir.Shape(a.Ints("shape"))
			if len(shape) != 2 || shape[0] < 1 || shape[1] < 1 {
				return nil, Errorf("shape must be [rows, D], got %v", shape)
			}
			if a.Int("count") < 1 || a.Int("max_rows") < 1 {
				return nil, Errorf("count and max_rows must be at least 1")
			}
			return []Type{newRows(shape, a.Int("count")*a.Int("max_rows"))}, nil
		},
		Blocking: true,
	})
}
