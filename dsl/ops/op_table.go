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
		Name: "fetch_rows", Transfer: true, On: ir.TrainerRole, Doc: "sends each shard of table `var` the unique ids of the inputs it owns (id mod shards), and outputs the rows they answer (row-sparse); ids < 0 are padding and not fetched. A dynamic table's (shape [dynamic, D]): int64 keys, sent with their counts to the shard dyntable.ShardOf names, the rows 0..n-1 in order of first sight (dyn_pos maps keys to them)", Internal: true,
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
		Name: "send_rows", Transfer: true, On: ir.TrainerRole, Doc: "sends each shard of table `var` the rows of the row gradient g it owns (as local rows, with their values)", Internal: true,
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
		Name: "serve_rows", Transfer: true, On: ir.PServerRole, Doc: "answers each trainer's ids for shard table with those rows (transfer `var`@ids in, `var`@rows out)", Internal: true,
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
		Name: "accumulate_rows", Transfer: true, On: ir.PServerRole, Doc: "blocks until `count` row gradients of `var` arrived from distinct trainers, and outputs their mean as one row gradient (rows merged)", Internal: true,
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

// The bundled forms of the four ops (docs/wire.md, "Table bundles"): a
// split job with several fixed tables sharded over the same pservers
// moves every table's ids, rows and row gradients between a trainer and
// a pserver as one message per direction and step, in the order of the
// ops' inputs or outputs, instead of one message per table. Each table's
// part is what its own op would move.
func init() {
	register(&Def{
		Name: "fetch_tables", Transfer: true, On: ir.TrainerRole, Doc: "fetch_rows of several fixed tables in one request and one reply per shard (transfer `var`@ids, `var`@rows): the ids inputs are the tables' in turn (`inputs`[t] of them for table t), the outputs each table's fetched rows; the request is every table's count of ids (int32), then their ids", Internal: true,
		Outputs: []string{"rows"}, MinInputs: 2, MaxInputs: -1, MinOutputs: 2, MaxOutputs: -1,
		Attrs: []AttrSpec{
			attrVar,
			{Name: "shards", Kind: AttrInt, Required: true, Doc: "the pservers every table is sharded over"},
			{Name: "inputs", Kind: AttrInts, Required: true, Doc: "the ids inputs of each table, in output order"},
			{Name: "shapes", Kind: AttrInts, Required: true, Doc: "each whole table's [V, D], in output order"},
		},
		SparseIn: true,
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			groups, shapes := a.Ints("inputs"), a.Ints("shapes")
			if len(groups) < 2 || len(shapes) != 2*len(groups) {
				return nil, Errorf("inputs must list the ids inputs of at least 2 tables and shapes their [V, D] (2 values each), got %v and %v", groups, shapes)
			}
			if a.Int("shards") < 1 {
				return nil, Errorf("shards must be at least 1, got %d", a.Int("shards"))
			}
			out := make([]Type, len(groups))
			at := 0
			for t, n := range groups {
				v, d := shapes[2*t], shapes[2*t+1]
				if n < 1 || at+n > len(in) || v < 1 || d < 1 {
					return nil, Errorf("table %d: %d ids inputs of shape [%d, %d] do not fit the %d inputs", t, n, v, d, len(in))
				}
				rows := 0
				for i, ty := range in[at : at+n] {
					if ty.DType != ir.I32 || ty.Sparse() {
						return nil, Errorf("input %d must be int32 ids, got %v", at+i, ty)
					}
					rows += ty.Shape.Numel()
				}
				out[t] = newRows(ir.Shape{v, d}, rows)
				at += n
			}
			if at != len(in) {
				return nil, Errorf("inputs lists %d ids inputs, the op has %d", at, len(in))
			}
			return out, nil
		},
		Blocking: true,
	}, &Def{
		Name: "send_tables", Transfer: true, On: ir.TrainerRole, Doc: "send_rows of several fixed tables' row gradients in one message per shard (transfer `var`): every table's count of rows (int32), then each table's local rows (int32) and their values", Internal: true,
		Outputs: []string{}, MinInputs: 2, MaxInputs: -1,
		Attrs: []AttrSpec{
			attrVar,
			{Name: "shards", Kind: AttrInt, Required: true, Doc: "the pservers every table is sharded over"},
		},
		SparseIn: true,
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			for i, t := range in {
				if !t.Sparse() || len(t.Shape) != 2 || t.Shape[0] == ir.DynamicRows {
					return nil, Errorf("input %d must be a row gradient of a fixed [V, D] table, got %v", i, t)
				}
			}
			if a.Int("shards") < 1 {
				return nil, Errorf("shards must be at least 1, got %d", a.Int("shards"))
			}
			return []Type{}, nil
		},
		Stateful: true,
	}, &Def{
		Name: "serve_tables", Transfer: true, On: ir.PServerRole, Doc: "serve_rows of several fixed tables' shards, the inputs: answers each trainer's bundled request (transfer `var`@ids) with every table's rows in one reply (`var`@rows)", Internal: true,
		Outputs: []string{}, MinInputs: 2, MaxInputs: -1,
		Attrs: []AttrSpec{
			attrVar,
			{Name: "count", Kind: AttrInt, Required: true, Doc: "requests per step: the trainer count in sync mode; 1 in async mode, where requests are served as they come until a row gradient is pending"},
			{Name: "max_rows", Kind: AttrInts, Required: true, Doc: "the most ids one request holds of each table"},
		},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if len(a.Ints("max_rows")) != len(in) {
				return nil, Errorf("max_rows must give each of the %d tables its most ids, got %v", len(in), a.Ints("max_rows"))
			}
			for i, t := range in {
				if t.DType != ir.F32 || len(t.Shape) != 2 || t.Sparse() {
					return nil, Errorf("input %d must be a dense float32 [rows, D] shard, got %v", i, t)
				}
				if a.Ints("max_rows")[i] < 1 {
					return nil, Errorf("max_rows must be at least 1")
				}
			}
			if a.Int("count") < 1 {
				return nil, Errorf("count must be at least 1")
			}
			return []Type{}, nil
		},
		Blocking: true, Stateful: true,
	}, &Def{
		Name: "accumulate_tables", Transfer: true, On: ir.PServerRole, Doc: "accumulate_rows of several fixed tables' shards from one bundled row gradient per trainer (transfer `var`): outputs each table's mean row gradient", Internal: true,
		Outputs: []string{"g"}, MinOutputs: 2, MaxOutputs: -1,
		Attrs: []AttrSpec{
			attrVar,
			{Name: "count", Kind: AttrInt, Required: true, Doc: "pieces per step: the trainer count in sync mode, 1 in async mode"},
			{Name: "shapes", Kind: AttrInts, Required: true, Doc: "each shard's [rows, D], in output order"},
			{Name: "max_rows", Kind: AttrInts, Required: true, Doc: "the most rows one piece holds of each table"},
		},
		Infer: func(_ []Type, a Attrs) ([]Type, error) {
			shapes, most := a.Ints("shapes"), a.Ints("max_rows")
			if len(most) < 2 || len(shapes) != 2*len(most) {
				return nil, Errorf("max_rows must list at least 2 tables and shapes their [rows, D] (2 values each), got %v and %v", most, shapes)
			}
			if a.Int("count") < 1 {
				return nil, Errorf("count must be at least 1")
			}
			out := make([]Type, len(most))
			for t, m := range most {
				if shapes[2*t] < 1 || shapes[2*t+1] < 1 || m < 1 {
					return nil, Errorf("table %d: shape [%d, %d] and max_rows %d must be positive", t, shapes[2*t], shapes[2*t+1], m)
				}
				out[t] = newRows(ir.Shape{shapes[2*t], shapes[2*t+1]}, a.Int("count")*m)
			}
			return out, nil
		},
		Blocking: true,
	})
}
