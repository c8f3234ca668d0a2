package dsl

import (
	"maps"
	"slices"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
)

// DynamicTable is what a node needs to hold a dynamic table of a lowered
// graph (LowerDynamic): its declaration, its initializer, and its per-row
// optimizer state, stored beside the value in the table's rows.
type DynamicTable struct {
	Name    string
	Dynamic *Dynamic
	Init    *Init
	// State lists the per-row optimizer state variables in column order:
	// state j occupies columns [Col, Col+Width) of a row (after the value's
	// Dim columns).
	State      []DynamicState
	StateWidth int
}

// DynamicState is one per-row optimizer state of a dynamic table.
type DynamicState struct {
	Name       string
	Col, Width int
	Init       *Init
}

// DynamicRowsName is the name of the rows dyn_pull fetches of table p.
func DynamicRowsName(p string) string { return p + "@rows" }

// DynamicPosName is the name of the positions of ids's keys in the rows
// pulled (or, on a trainer of a split job, fetched) of dynamic table p.
func DynamicPosName(p, ids string) string { return p + "@pos." + ids }

// LowerDynamic returns a copy of g in which each dynamic table is read
// and updated through the dyn_* ops (dsl/ops/op_dynamic.go) instead of a
// tensor: the table and its per-row optimizer state are no longer
// variables; the lookups read the rows dyn_pull fetched, through dyn_pos;
// the optimizer's gather_rows of the table or a state become dyn_gather,
// and their assigns one dyn_scatter. g is unchanged. A graph without
// dynamic tables is returned as it is.
func LowerDynamic(g *Graph) (*Graph, []DynamicTable, error) {
	dyn := g.DynamicParams()
	if len(dyn) == 0 {
		return g, nil, nil
	}
	l := *g
	l.Types = nil
	l.Vars = maps.Clone(g.Vars)
	l.Ops = make([]*Op, 0, len(g.Ops)+4*len(dyn))
	for _, op := range g.Ops {
		c := *op
		c.Inputs = slices.Clone(op.Inputs)
		l.Ops = append(l.Ops, &c)
	}
	l.Assigns = slices.Clone(g.Assigns)
	var tables []DynamicTable
	for _, p := range dyn {
		t, err := l.lowerTable(p)
		if err != nil {
			return nil, nil, err
		}
		tables = append(tables, t)
	}
	l.Order = slices.DeleteFunc(slices.Clone(g.Order), func(n string) bool { return l.Vars[n] == nil })
	return &l, tables, nil
}

// lowerTable lowers dynamic table p in l (a copy LowerDynamic owns).
func (l *Graph) lowerTable(p string) (DynamicTable, error) {
	pv := l.Vars[p]
	dim := pv.Dynamic.Dim
	t := DynamicTable{Name: p, Dynamic: pv.Dynamic, Init: pv.Init}
	cols := map[string][2]int{p: {0, dim}} // table or state -> column, width
	for _, n := range l.Order {
		v := l.Vars[n]
		if v == nil || v.Kind != KindState || v.Of != p || len(v.Shape) == 0 || v.Shape[0] != ir.DynamicRows {
			continue
		}
		w := v.Shape[1:].Numel()
		t.State = append(t.State, DynamicState{Name: n, Col: dim + t.StateWidth, Width: w, Init: v.Init})
		cols[n] = [2]int{dim + t.StateWidth, w}
		t.StateWidth += w
	}
	for n := range cols {
		delete(l.Vars, n)
	}
	rows := DynamicRowsName(p)
	var pull *Op
	var ids []string
	var gathered []string
	served := false
	n := len(l.Ops)
	for i := 0; i < n; i++ {
		op := l.Ops[i]
		def, _ := ops.Lookup(op.Type)
		switch {
		case (op.Type == "serve_rows" && len(op.Inputs) == 1 && op.Inputs[0] == p) ||
			(op.Type == "accumulate_rows" && len(op.Outputs) == 1 && op.Outputs[0] == GradName(p)):
			sh := pv.Dynamic.Shard
			if sh == nil {
				return t, Errorf(op.Pos, "op %s serves dynamic table %s, which is not a pserver's shard (its dynamic: has no shard: {of, index, count}); split the model with psgraph split", op.Type, p)
			}
			served = true
			*op = *lowerServe(op, p, dim, sh)
		case def != nil && def.ReadsTable && len(op.Inputs) > 1 && op.Inputs[0] == p:
			if pull == nil {
				pull = NewOp("dyn_pull", nil, []string{rows}, ops.Attrs{"var": p, "dim": dim}, Forward, op.Pos)
			}
			if !slices.Contains(ids, op.Inputs[1]) {
				ids = append(ids, op.Inputs[1])
			}
			op.Inputs[0], op.Inputs[1] = rows, DynamicPosName(p, op.Inputs[1])
		case def != nil && def.RowGrad && len(op.Inputs) > 2 && op.Inputs[2] == p:
			op.Inputs[1], op.Inputs[2] = DynamicPosName(p, op.Inputs[1]), rows
		case op.Type == "gather_rows" && len(op.Inputs) == 2:
			c, ok := cols[op.Inputs[0]]
			if !ok {
				continue
			}
			*op = *NewOp("dyn_gather", []string{op.Inputs[1]}, op.Outputs, ops.Attrs{"var": p, "col": c[0], "width": c[1]}, op.Section, op.Pos)
			op.Param = p
			gathered = append(gathered, op.Outputs[0])
		default:
			for j, in := range op.Inputs {
				if _, ok := cols[in]; ok {
					return t, Errorf(op.Pos, "op %s reads %q (input %d) of dynamic table %s as a whole; a dynamic table's rows and state are read only for the keys a step looks up (lookup_table, embedding_bag, and the optimizer's row gathers)", op.Type, in, j, p)
				}
			}
		}
	}
	if pull == nil && !served {
		return t, Errorf(pv.Pos, "dynamic table %s is read by no lookup_table or embedding_bag; use it in the model or remove it", p)
	}
	var lowered []*Op
	if pull != nil {
		pull.Inputs = ids
		lowered = append(lowered, pull)
		for _, in := range ids {
			lowered = append(lowered, NewOp("dyn_pos", []string{rows, in}, []string{DynamicPosName(p, in)}, ops.Attrs{"var": p}, Forward, pull.Pos))
		}
	}
	var values []string
	var at []int
	var pos Pos
	l.Assigns = slices.DeleteFunc(l.Assigns, func(a Assign) bool {
		c, ok := cols[a.Target]
		if ok {
			values, at, pos = append(values, a.Value), append(at, c[0]), a.Pos
		}
		return ok
	})
	if len(values) > 0 {
		sc := NewOp("dyn_scatter", append(values, gathered...), nil, ops.Attrs{"var": p, "cols": at}, Optimize, pos)
		sc.Param = p
		lowered = append(lowered, sc)
	}
	l.Ops = append(lowered, l.Ops...)
	return t, nil
}

// lowerServe is the dyn_serve or dyn_accumulate of a pserver's shard p
// of a dynamic table in place of op, its serve_rows or accumulate_rows:
// the same transfers (attribute transfer, op's var) and counts, over the
// shard's dyntable.Table.
func lowerServe(op *Op, p string, dim int, sh *DynamicShard) *Op {
	typ := "dyn_serve"
	if op.Type == "accumulate_rows" {
		typ = "dyn_accumulate"
	}
	c := NewOp(typ, nil, op.Outputs, ops.Attrs{"var": p, "transfer": op.Attrs.String("var"), "count": op.Attrs.Int("count"),
		"max_rows": op.Attrs.Int("max_rows"), "dim": dim, "shard": sh.Index, "shards": sh.Count}, op.Section, op.Pos)
	c.Param = op.Param
	return c
}
