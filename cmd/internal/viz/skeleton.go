package viz

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/partition"
)

// maxListed bounds the names a skeleton label lists; the rest are counted.
const maxListed = 3

func listNames(names []string) string {
	if len(names) <= maxListed {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s, ... (+%d more)", strings.Join(names[:maxListed], ", "), len(names)-maxListed)
}

// skeleton draws only a plan's communication: per node, a box for what it
// receives from each peer, one for its compute, one for what it sends to
// each peer, and its parameter blocks; between nodes one dashed edge per
// direction, listing the transfers. Its size depends on the number of
// nodes, not of layers, so a deep model still fits on a screen.
func skeleton(p *partition.Plan) []byte {
	w := &writer{}
	in := p.Info
	header(w, fmt.Sprintf("%s: %d trainers (%s), %d pservers, communication", in.Model, in.Trainers, in.Mode, in.PServers))
	// left to right: the trainer, then the pservers stacked beside it
	w.line("rankdir=LR;")
	type link struct{ from, to string }
	moved := map[link][]string{}
	bytes := map[link]int{}
	var links []link
	for _, t := range in.Transfers {
		l := link{t.From, t.To}
		if _, ok := moved[l]; !ok {
			links = append(links, l)
		}
		moved[l] = append(moved[l], t.Var)
		n := 4
		for _, d := range t.Shape {
			n *= d
		}
		bytes[l] += n
	}
	id := func(node, what string) string { return node + "/" + what }
	peers := func(node string, incoming bool) []string {
		var out []string
		for _, l := range links {
			switch {
			case incoming && l.to == node:
				out = append(out, l.from)
			case !incoming && l.from == node:
				out = append(out, l.to)
			}
		}
		return out
	}
	cluster := func(node, title string, g *dsl.Graph, trainer bool) {
		w.line("subgraph %s {", q("cluster_"+node))
		w.indent++
		w.line(`label=%s; style="rounded"; color="#333333"; penwidth=2; fontsize=14;`, q(title))
		var compute, update int
		for _, op := range g.Ops {
			if !isComm(op) {
				if op.Section == dsl.Optimize {
					update++
				} else {
					compute++
				}
			}
		}
		core := id(node, "compute")
		if trainer {
			w.line("%s [label=%s, shape=box3d, style=filled, fillcolor=%s, color=%s];", q(core), q(fmt.Sprintf("forward + backward\n(%d ops)", compute)), q(sectionFill[dsl.Forward]), q(sectionBorder[dsl.Forward]))
		} else {
			// one gold box: the blocks this pserver holds and their optimizer
			var held []string
			for _, n := range g.Params() {
				v := g.Vars[n]
				s := n + " " + v.Shape.String()
				if b := v.Block; b != nil {
					s += fmt.Sprintf(" = rows [%d, %d) of %s", b.Start, b.End, b.Of)
				}
				held = append(held, s)
			}
			if len(held) > maxListed {
				held = append(held[:maxListed], fmt.Sprintf("... (+%d more)", len(held)-maxListed))
			}
			if len(held) == 0 {
				held = []string{"idle: holds nothing"}
			}
			label := strings.Join(held, "\n") + fmt.Sprintf("\noptimizer: %d ops", update)
			w.line("%s [label=%s, shape=box3d, style=\"filled,bold\", fillcolor=\"#ffd966\", color=%s, penwidth=2];", q(core), q(label), q(sectionBorder[dsl.Optimize]))
		}
		for _, peer := range peers(node, true) {
			verb := "recv"
			if !trainer {
				verb = "accumulate"
			}
			n := len(moved[link{peer, node}])
			w.line("%s [label=%s, shape=cds, style=\"rounded,filled\", fillcolor=%s];", q(id(node, "from "+peer)), q(fmt.Sprintf("%s %d from %s", verb, n, peer)), q(sectionFill[dsl.Forward]))
			w.line("%s -> %s;", q(id(node, "from "+peer)), q(core))
		}
		for _, peer := range peers(node, false) {
			n := len(moved[link{node, peer}])
			w.line("%s [label=%s, shape=cds, style=\"rounded,filled\", fillcolor=%s];", q(id(node, "to "+peer)), q(fmt.Sprintf("send %d to %s", n, peer)), q(sectionFill[dsl.Backward]))
			w.line("%s -> %s;", q(core), q(id(node, "to "+peer)))
		}
		w.indent--
		w.line("}")
	}
	cluster("trainer", fmt.Sprintf("trainer (x%d)", in.Trainers), p.Trainer, true)
	for i, g := range p.PServers {
		cluster("pserver:"+strconv.Itoa(i), fmt.Sprintf("pserver-%d", i), g, false)
	}
	for _, l := range links {
		constraint := ""
		if l.to == "trainer" {
			constraint = ", constraint=false"
		}
		label := fmt.Sprintf("%s\n%s", listNames(moved[l]), byteCount(bytes[l]))
		w.line("%s -> %s [label=%s, style=dashed, penwidth=1.5, color=\"#7a3fa0\", fontcolor=\"#7a3fa0\"%s];",
			q(id(l.from, "to "+l.to)), q(id(l.to, "from "+l.from)), q(label), constraint)
	}
	footer(w)
	return []byte(w.b.String())
}

func byteCount(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB per step", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB per step", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B per step", n)
}
