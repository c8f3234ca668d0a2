package viz

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/partition"
)

// Plan returns the DOT text of a placed job: one cluster per node holding
// its subgraph, and one dashed edge per send/recv pair, from the sending op
// to the receiving one, labelled with the transfer.
//
// With CommOnly it draws the communication skeleton instead: per node and
// peer one box and one dashed edge listing the transfers.
func Plan(p *partition.Plan, opt Options) []byte {
	if opt.CommOnly {
		return skeleton(p)
	}
	w := &writer{}
	in := p.Info
	header(w, fmt.Sprintf("%s: %d trainers (%s), %d pservers", in.Model, in.Trainers, in.Mode, in.PServers))
	type node struct {
		name, title string
		d           *drawing
	}
	nodes := []node{{"trainer", fmt.Sprintf("trainer (x%d)", in.Trainers), newDrawing(p.Trainer, "trainer/", opt)}}
	for i, g := range p.PServers {
		title := fmt.Sprintf("pserver-%d", i)
		if i < len(in.Load) {
			l := in.Load[i]
			if l.Endpoint != "" {
				title += " " + l.Endpoint
			}
			title += fmt.Sprintf(" (%d blocks)", len(l.Blocks))
		}
		nodes = append(nodes, node{"pserver:" + strconv.Itoa(i), title, newDrawing(g, fmt.Sprintf("pserver-%d/", i), opt)})
	}
	byName := map[string]*drawing{}
	for _, n := range nodes {
		byName[n.name] = n.d
		w.line("subgraph %s {", q("cluster_"+n.d.prefix))
		w.indent++
		w.line(`label=%s; style="rounded"; color="#333333"; penwidth=2; fontsize=14;`, q(n.title))
		n.d.nodes(w)
		n.d.edges(w)
		if len(n.d.g.Ops) == 0 && len(n.d.g.Order) == 0 {
			w.line("%s [label=\"idle\", shape=plaintext];", q(n.d.prefix+"idle"))
		}
		w.indent--
		w.line("}")
	}
	for _, t := range in.Transfers {
		from, to := byName[t.From], byName[t.To]
		if from == nil || to == nil {
			continue
		}
		s, r := from.findOp(t.Var, "send"), to.findOp(t.Var, "recv", "accumulate")
		if t.AtMost { // a lookup table's: ids up, rows down, row gradients up
			table, kind, _ := strings.Cut(t.Var, "@")
			if rest, ok := strings.CutPrefix(t.Var, ops.TableBundle+"@"); ok { // the tables' bundle
				table, kind = ops.TableBundle, rest
			}
			switch kind {
			case "ids":
				s, r = from.findOp(table, "fetch_rows", "fetch_tables"), to.findOp(table, "serve_rows", "serve_tables")
			case "rows":
				s, r = from.findOp(table, "serve_rows", "serve_tables"), to.findOp(table, "fetch_rows", "fetch_tables")
			default:
				s, r = from.findOp(t.Var, "send_rows", "send_tables"), to.findOp(t.Var, "accumulate_rows", "accumulate_tables")
			}
		}
		if s < 0 || r < 0 {
			continue
		}
		// Gradients flow down into the pservers' clusters; the parameters
		// served back for the next step do not constrain the ranks, so each
		// trainer recv stays at the top, before the ops reading it.
		constraint := ""
		if t.To == "trainer" {
			constraint = ", constraint=false"
		}
		w.line("%s -> %s [label=%s, style=dashed, penwidth=1.5, color=\"#7a3fa0\", fontcolor=\"#7a3fa0\"%s];",
			q(from.opID(s)), q(to.opID(r)), q(t.Var+" "+shapeString(t.Shape)), constraint)
	}
	footer(w)
	return []byte(w.b.String())
}

// findOp returns the index of the op of one of the types moving var, or -1.
func (d *drawing) findOp(v string, types ...string) int {
	for i, op := range d.g.Ops {
		for _, t := range types {
			if op.Type == t && op.Attrs.String("var") == v {
				return i
			}
		}
	}
	return -1
}

func shapeString(s []int) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = strconv.Itoa(x)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
