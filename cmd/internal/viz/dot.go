package viz

import (
	"fmt"
	"strings"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
)

// Options select how much of a graph is drawn.
type Options struct {
	// CollapseBackward draws each node's backward section as one box, and
	// each parameter's optimizer ops (Adam's dozens per parameter) as one
	// box per parameter.
	CollapseBackward bool
	// CommOnly draws only the communication skeleton of a plan: per node
	// its parameter blocks, compute and one box per peer it talks to.
	CommOnly bool
}

// Section colours: forward blue, backward red, optimize green.
var sectionFill = map[dsl.Section]string{
	dsl.Forward:  "#dbe9f6",
	dsl.Backward: "#f8dcdc",
	dsl.Optimize: "#dcf0dc",
}

var sectionBorder = map[dsl.Section]string{
	dsl.Forward:  "#4a78a8",
	dsl.Backward: "#b04a4a",
	dsl.Optimize: "#4a9a4a",
}

// writer accumulates DOT text with indentation.
type writer struct {
	b      strings.Builder
	indent int
}

func (w *writer) line(format string, args ...any) {
	w.b.WriteString(strings.Repeat("  ", w.indent))
	fmt.Fprintf(&w.b, format, args...)
	w.b.WriteByte('\n')
}

// q quotes a DOT identifier or label.
func q(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

func header(w *writer, name string) {
	w.line("digraph %s {", q(name))
	w.indent++
	w.line(`graph [rankdir=TB, fontname="Helvetica", fontsize=12, nodesep=0.25, ranksep=0.35, newrank=true, label=%s, labelloc=t];`, q(name))
	w.line(`node [fontname="Helvetica", fontsize=10, penwidth=1];`)
	w.line(`edge [fontname="Helvetica", fontsize=8, color="#555555", penwidth=1];`)
}

func footer(w *writer) {
	w.indent--
	w.line("}")
}

// drawing is one graph (a model or one node of a plan) being drawn, with
// node ids prefixed so several drawings share one DOT file.
type drawing struct {
	g      *dsl.Graph
	prefix string
	opt    Options
	// producer maps a variable to the index of the op writing it.
	producer map[string]int
	// hidden ops are folded into a summary box: op index -> box id.
	folded map[int]string
	boxes  []box
	// assigned maps a value to the persistent variables assigned from it.
	assigned map[string][]string
}

type box struct {
	id, label string
	section   dsl.Section
}

func newDrawing(g *dsl.Graph, prefix string, opt Options) *drawing {
	d := &drawing{g: g, prefix: prefix, opt: opt, producer: map[string]int{}, folded: map[int]string{}, assigned: map[string][]string{}}
	for _, a := range g.Assigns {
		d.assigned[a.Value] = append(d.assigned[a.Value], a.Target)
	}
	for i, op := range g.Ops {
		for _, o := range op.Outputs {
			d.producer[o] = i
		}
	}
	count := map[string]int{}
	var order []string
	labels := map[string]box{}
	fold := func(i int, key, label string, s dsl.Section) {
		id := d.prefix + "box:" + key
		if _, ok := labels[id]; !ok {
			labels[id] = box{id: id, label: label, section: s}
			order = append(order, id)
		}
		count[id]++
		d.folded[i] = id
	}
	for i, op := range g.Ops {
		switch {
		case opt.CollapseBackward && op.Section == dsl.Backward && !isComm(op):
			fold(i, "backward", "backward", dsl.Backward)
		case opt.CollapseBackward && op.Section == dsl.Optimize && !isComm(op) && op.Param != "":
			fold(i, "optimize:"+op.Param, "update of "+op.Param, dsl.Optimize)
		}
	}
	for _, id := range order {
		b := labels[id]
		b.label = fmt.Sprintf("%s\n(%d ops)", b.label, count[id])
		d.boxes = append(d.boxes, b)
	}
	return d
}

// isComm reports whether op moves tensors between nodes (the catalog's
// transfer ops).
func isComm(op *dsl.Op) bool {
	def, _ := ops.Lookup(op.Type)
	return def.Transfer
}

func (d *drawing) varID(name string) string { return d.prefix + "v:" + name }
func (d *drawing) opID(i int) string {
	if id, ok := d.folded[i]; ok {
		return id
	}
	return fmt.Sprintf("%sop:%d", d.prefix, i)
}

// visible reports whether a variable gets a node: declared variables always
// do; temporaries only when the op writing them is drawn itself.
func (d *drawing) visible(name string) bool {
	if _, ok := d.g.Vars[name]; ok {
		return true
	}
	i, ok := d.producer[name]
	if !ok {
		return true // read but never written: show it rather than drop an edge
	}
	_, folded := d.folded[i]
	return !folded
}

func (d *drawing) typeOf(name string) string {
	if t, ok := d.g.Types[name]; ok {
		return t.Shape.String()
	}
	if v, ok := d.g.Vars[name]; ok {
		return v.Shape.String()
	}
	return ""
}

func (d *drawing) varNode(w *writer, name string) {
	v := d.g.Vars[name]
	label := name
	attrs := `shape=ellipse, style=filled, fillcolor=white`
	if v != nil {
		switch v.Kind {
		case dsl.KindData:
			attrs = `shape=parallelogram, style=filled, fillcolor="#fff4cc"`
			label += "\ndata " + v.Shape.String()
		case dsl.KindParam:
			attrs = `shape=box, style="filled,bold", fillcolor="#ffd966", penwidth=2`
			label += "\nparam " + v.Shape.String()
		case dsl.KindState:
			attrs = `shape=box, style="filled,dashed", fillcolor="#fff2cc"`
			label += "\nstate " + v.Shape.String()
		}
		if b := v.Block; b != nil && b.Step() > 1 {
			label += fmt.Sprintf("\nrows %d, %d, ... (mod %d) of %s %s", b.Start, b.Start+b.Step(), b.Step(), b.Of, b.Shape.String())
		} else if b != nil {
			label += fmt.Sprintf("\nrows [%d, %d) of %s %s", b.Start, b.End, b.Of, b.Shape.String())
		}
	}
	if targets := d.assigned[name]; len(targets) > 0 {
		// an assign edge back to the parameter would cross the whole
		// picture; the value says what it becomes instead
		for _, t := range targets {
			label += "\nnext " + t
		}
		attrs += `, peripheries=2`
	}
	w.line("%s [label=%s, %s];", q(d.varID(name)), q(label), attrs)
}

func (d *drawing) opNode(w *writer, i int) {
	op := d.g.Ops[i]
	label := op.Type
	switch op.Type {
	case "send":
		label += " " + op.Attrs.String("var") + "\nto " + op.Attrs.String("to")
	case "recv":
		label += " " + op.Attrs.String("var") + "\nfrom " + op.Attrs.String("from")
	case "accumulate":
		label += fmt.Sprintf(" %s\nsum of %d", op.Attrs.String("var"), op.Attrs.Int("count"))
	case "fetch_rows":
		label += fmt.Sprintf(" %s\nby id from %d shards", op.Attrs.String("var"), op.Attrs.Int("shards"))
	case "send_rows":
		label += fmt.Sprintf(" %s\nto %d shards", op.Attrs.String("var"), op.Attrs.Int("shards"))
	case "serve_rows":
		label += fmt.Sprintf(" %s\nto %d fetches", op.Attrs.String("var"), op.Attrs.Int("count"))
	case "accumulate_rows":
		label += fmt.Sprintf(" %s\nrows of %d", op.Attrs.String("var"), op.Attrs.Int("count"))
	case "fetch_tables":
		label += fmt.Sprintf(" %s\nby id from %d shards", tableNames(op.Outputs, ops.FetchedSuffix), op.Attrs.Int("shards"))
	case "send_tables":
		label += fmt.Sprintf(" %s\nto %d shards", tableNames(op.Inputs, ops.GradSuffix), op.Attrs.Int("shards"))
	case "serve_tables":
		label += fmt.Sprintf(" %s\nto %d fetches", tableNames(op.Inputs, ""), op.Attrs.Int("count"))
	case "accumulate_tables":
		label += fmt.Sprintf(" %s\nrows of %d", tableNames(op.Outputs, ops.GradSuffix), op.Attrs.Int("count"))
	}
	shape := "box"
	if isComm(op) {
		shape = "cds"
	}
	w.line("%s [label=%s, shape=%s, style=\"rounded,filled\", fillcolor=%s, color=%s];",
		q(d.opID(i)), q(label), shape, q(sectionFill[op.Section]), q(sectionBorder[op.Section]))
}

// nodes writes every node: declared vars at the top, then a cluster per
// section holding its ops and the temporaries they write.
func (d *drawing) nodes(w *writer) {
	declared := map[string]bool{}
	for _, n := range d.g.Order {
		declared[n] = true
		d.varNode(w, n)
	}
	// temporaries read but never written nor declared
	seen := map[string]bool{}
	for _, op := range d.g.Ops {
		for _, in := range op.Inputs {
			if _, ok := d.producer[in]; !ok && !declared[in] && !seen[in] {
				seen[in] = true
				d.varNode(w, in)
			}
		}
	}
	for _, s := range []dsl.Section{dsl.Forward, dsl.Backward, dsl.Optimize} {
		var ops []int
		for i, op := range d.g.Ops {
			if op.Section == s {
				ops = append(ops, i)
			}
		}
		var boxes []box
		for _, b := range d.boxes {
			if b.section == s {
				boxes = append(boxes, b)
			}
		}
		if len(ops) == 0 && len(boxes) == 0 {
			continue
		}
		w.line("subgraph %s {", q("cluster_"+d.prefix+s.String()))
		w.indent++
		w.line(`label=%s; style="rounded,filled"; fillcolor=%s; color=%s; fontcolor=%s;`, q(s.String()), q(lighten(s)), q(sectionBorder[s]), q(sectionBorder[s]))
		for _, b := range boxes {
			w.line("%s [label=%s, shape=box3d, style=filled, fillcolor=%s, color=%s];", q(b.id), q(b.label), q(sectionFill[b.section]), q(sectionBorder[b.section]))
		}
		for _, i := range ops {
			if _, folded := d.folded[i]; folded {
				continue
			}
			d.opNode(w, i)
			for _, o := range d.g.Ops[i].Outputs {
				if !declared[o] {
					d.varNode(w, o)
				}
			}
		}
		w.indent--
		w.line("}")
	}
}

func lighten(s dsl.Section) string {
	switch s {
	case dsl.Forward:
		return "#f3f8fd"
	case dsl.Backward:
		return "#fdf3f3"
	}
	return "#f3fbf3"
}

// edges writes data-flow edges (labelled with shapes) and assigns, each
// once: folded ops share their box's edges.
func (d *drawing) edges(w *writer) {
	done := map[[2]string]bool{}
	edge := func(from, to, label, extra string) {
		if from == to || done[[2]string{from, to}] {
			return
		}
		done[[2]string{from, to}] = true
		attr := ""
		if label != "" {
			attr = "label=" + q(label)
		}
		if extra != "" {
			if attr != "" {
				attr += ", "
			}
			attr += extra
		}
		if attr != "" {
			attr = " [" + attr + "]"
		}
		w.line("%s -> %s%s;", q(from), q(to), attr)
	}
	// endpoint is where a variable's edges attach: its own node, or the
	// box of the folded op that writes it.
	endpoint := func(name string) string {
		if d.visible(name) {
			return d.varID(name)
		}
		return d.opID(d.producer[name])
	}
	for i, op := range d.g.Ops {
		id := d.opID(i)
		for _, in := range op.Inputs {
			edge(endpoint(in), id, d.typeOf(in), "")
		}
		for _, o := range op.Outputs {
			if d.visible(o) {
				edge(id, d.varID(o), "", "")
			}
		}
	}
}

// Model returns the DOT text of a model graph.
func Model(g *dsl.Graph, opt Options) []byte {
	w := &writer{}
	name := g.Name
	if name == "" {
		name = "model"
	}
	header(w, name)
	d := newDrawing(g, "", opt)
	d.nodes(w)
	d.edges(w)
	footer(w)
	return []byte(w.b.String())
}

// tableNames lists a bundled table op's tables, their names without
// suffix, and how many at most four leave out.
func tableNames(names []string, suffix string) string {
	var out []string
	for i, n := range names {
		if i == 4 {
			out = append(out, fmt.Sprintf("and %d more", len(names)-4))
			break
		}
		out = append(out, strings.TrimSuffix(n, suffix))
	}
	return strings.Join(out, ", ")
}
