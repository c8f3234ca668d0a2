package partition

import (
	"slices"
	"strings"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
)

// Table bundles. A model with many tables (DLRM: one per categorical
// column) moved each table's ids, rows and row gradient as messages of
// their own: 26 tables over 2 pservers are 156 small messages per trainer
// and step, and the cost of a message (its goroutine hand-offs and
// stream reads on both ends) outweighed the bytes. bundleTrainer and
// bundlePServer replace the per-table ops of every fixed table with one
// op per side and direction: a trainer's fetch_tables (one request and one reply per
// pserver) and send_tables (one row gradient per pserver), a pserver's
// serve_tables and accumulate_tables. Each table's part of a message is
// what its own op moved, so the job computes exactly what the per-table
// plan computes (TestBundledTablesEqualSeparate); dynamic tables keep
// their own ops.

// bundled lists the fixed sharded tables whose ops split bundles, in
// name order (the order of their parts in every message): none unless
// there are two.
func (s *splitter) bundled() []string {
	if s.opt.SeparateTables {
		return nil
	}
	var out []string
	for _, gr := range s.byName {
		if gr.table && gr.pin != trainerNode && !gr.param.IsDynamic() {
			out = append(out, gr.param.Name)
		}
	}
	slices.Sort(out)
	if len(out) < 2 {
		return nil
	}
	return out
}

// bundleTrainer replaces the trainer's fetch_rows and send_rows of the
// tables with fetch_tables and send_tables, and returns the tables it
// bundled (bundlePServer does the same with them on the pservers). The
// bundle leaves where the first table's fetch was, after the ops that
// compute its tables' ids, which move before it; a table whose rows those
// ops need keeps its own fetch, which runs first.
func (s *splitter) bundleTrainer(t *dsl.Graph, tables []string) []string {
	fetchOf := map[string]int{} // table -> its fetch_rows
	sendOf := map[string]int{}  // table -> its send_rows
	prod := map[string]int{}    // variable -> the op computing it
	for i, op := range t.Ops {
		for _, o := range op.Outputs {
			prod[o] = i
		}
		switch op.Type {
		case "fetch_rows":
			fetchOf[op.Attrs.String("var")] = i
		case "send_rows":
			sendOf[strings.TrimSuffix(op.Attrs.String("var"), ops.GradSuffix)] = i
		}
	}
	var members []string
	for _, tb := range tables {
		_, f := fetchOf[tb]
		_, g := sendOf[tb]
		if f && g {
			members = append(members, tb)
		}
	}
	if len(members) < 2 {
		return nil
	}
	// The bundle goes where the first table's fetch was. The ops that
	// compute the tables' ids (a reshape or a hash of a data column),
	// and what they need, move before it; a table whose fetch is among
	// them, or whose rows they read, stays out of the bundle.
	at, hoist := 0, map[int]bool{}
	for {
		at = len(t.Ops)
		for _, tb := range members {
			at = min(at, fetchOf[tb])
		}
		clear(hoist)
		var walk func(name string)
		walk = func(name string) {
			p, ok := prod[name]
			if !ok || p < at || hoist[p] {
				return
			}
			hoist[p] = true
			for _, in := range t.Ops[p].Inputs {
				walk(in)
			}
		}
		for _, tb := range members {
			for _, in := range t.Ops[fetchOf[tb]].Inputs {
				walk(in)
			}
		}
		needs := map[string]bool{}
		for p := range hoist {
			for _, in := range t.Ops[p].Inputs {
				needs[in] = true
			}
		}
		kept := members[:0]
		for _, tb := range members {
			if !needs[ops.FetchedName(tb)] && !hoist[fetchOf[tb]] {
				kept = append(kept, tb)
			}
		}
		if len(kept) == len(members) {
			break
		}
		members = kept
		if len(members) < 2 {
			return nil
		}
	}
	var ids, fetched, grads []string
	var groups, shapes []int
	lastSend := -1
	drop := map[int]bool{}
	for _, tb := range members {
		f := t.Ops[fetchOf[tb]]
		ids = append(ids, f.Inputs...)
		fetched = append(fetched, ops.FetchedName(tb))
		groups = append(groups, len(f.Inputs))
		shapes = append(shapes, f.Attrs.Ints("shape")...)
		drop[fetchOf[tb]] = true
		i := sendOf[tb]
		grads = append(grads, t.Ops[i].Inputs[0])
		drop[i] = true
		lastSend = max(lastSend, i)
	}
	pos := s.groups[members[0]].param.Pos
	fetch := newOp("fetch_tables", ids, fetched, pos, attr{"var", ops.TableBundle}, attr{"shards", s.opt.PServers}, attr{"inputs", groups}, attr{"shapes", shapes})
	fetch.Section = dsl.Forward
	send := newOp("send_tables", grads, nil, pos, attr{"var", ops.GradName(ops.TableBundle)}, attr{"shards", s.opt.PServers})
	out := make([]*dsl.Op, 0, len(t.Ops)-len(drop)+2)
	for i, op := range t.Ops {
		if i == at {
			for j := at; j < len(t.Ops); j++ {
				if hoist[j] {
					out = append(out, t.Ops[j])
				}
			}
			out = append(out, fetch)
		}
		if !drop[i] && !hoist[i] {
			out = append(out, op)
		}
		if i == lastSend {
			out = append(out, send)
		}
	}
	t.Ops = out
	return members
}

// bundlePServer replaces pserver graph ps's serve_rows and
// accumulate_rows of the tables' shards with serve_tables and
// accumulate_tables, where the first table's were, in the tables' order.
func bundlePServer(ps *dsl.Graph, tables []string) {
	serveOf := map[string]*dsl.Op{}
	accOf := map[string]*dsl.Op{}
	at := -1
	for i, op := range ps.Ops {
		switch op.Type {
		case "serve_rows":
			if v := op.Attrs.String("var"); slices.Contains(tables, v) {
				serveOf[v] = op
				if at < 0 {
					at = i
				}
			}
		case "accumulate_rows":
			if v := strings.TrimSuffix(op.Attrs.String("var"), ops.GradSuffix); slices.Contains(tables, v) {
				accOf[v] = op
			}
		}
	}
	if at < 0 {
		return
	}
	var shards, grads []string
	var most, shapes []int
	for _, tb := range tables {
		sv, acc := serveOf[tb], accOf[tb]
		shards = append(shards, sv.Inputs[0])
		grads = append(grads, acc.Outputs[0])
		most = append(most, sv.Attrs.Int("max_rows"))
		shapes = append(shapes, acc.Attrs.Ints("shape")...)
	}
	first := serveOf[tables[0]]
	serve := newOp("serve_tables", shards, nil, first.Pos, attr{"var", ops.TableBundle}, attr{"count", first.Attrs.Int("count")}, attr{"max_rows", most})
	acc := newOp("accumulate_tables", nil, grads, first.Pos, attr{"var", ops.GradName(ops.TableBundle)}, attr{"count", first.Attrs.Int("count")},
		attr{"shapes", shapes}, attr{"max_rows", most})
	serve.Section, acc.Section = dsl.Optimize, dsl.Optimize
	out := make([]*dsl.Op, 0, len(ps.Ops)-2*len(tables)+2)
	for i, op := range ps.Ops {
		if i == at {
			out = append(out, serve, acc)
		}
		if op.Type == "serve_rows" && serveOf[op.Attrs.String("var")] == op ||
			op.Type == "accumulate_rows" && accOf[strings.TrimSuffix(op.Attrs.String("var"), ops.GradSuffix)] == op {
			continue
		}
		out = append(out, op)
	}
	ps.Ops = out
}
