package program

import (
	"sort"
	"strconv"

	"github.com/psgraph/psgraph/dsl"
)

// Components cuts a graph into its connected parts: ops, the variables they
// touch and the assigns that join them. On a pserver each part is the
// update of one parameter block (accumulate, optimizer ops, send), so each
// part runs as its own loop: a block is updated as soon as its gradients
// arrive, independently of the others, and its updates are serialized by
// that loop alone (the per-block lock of the design doc).
func Components(g *dsl.Graph) []*dsl.Graph {
	parent := map[string]string{}
	var find func(string) string
	find = func(x string) string {
		p, ok := parent[x]
		if !ok || p == x {
			parent[x] = x
			return x
		}
		r := find(p)
		parent[x] = r
		return r
	}
	union := func(a, b string) { parent[find(a)] = find(b) }
	opKey := func(i int) string { return "\x00op" + strconv.Itoa(i) }
	for i, op := range g.Ops {
		k := opKey(i)
		find(k)
		for _, v := range op.Inputs {
			union(k, v)
		}
		for _, v := range op.Outputs {
			union(k, v)
		}
		if s := op.Attrs.String("initial"); s != "" {
			union(k, s)
		}
	}
	for _, a := range g.Assigns {
		union(a.Target, a.Value)
	}
	for _, name := range g.Order {
		if v := g.Vars[name]; v.Of != "" {
			union(name, v.Of)
		}
	}
	parts := map[string]*dsl.Graph{}
	var roots []string
	part := func(x string) *dsl.Graph {
		r := find(x)
		p, ok := parts[r]
		if !ok {
			p = &dsl.Graph{File: g.File, Name: g.Name, Data: g.Data, Vars: map[string]*dsl.Var{}, Train: g.Train}
			parts[r] = p
			roots = append(roots, r)
		}
		return p
	}
	for i, op := range g.Ops {
		p := part(opKey(i))
		p.Ops = append(p.Ops, op)
	}
	for _, name := range g.Order {
		part(name).AddVar(g.Vars[name])
	}
	for _, a := range g.Assigns {
		p := part(a.Target)
		p.Assigns = append(p.Assigns, a)
	}
	out := make([]*dsl.Graph, 0, len(roots))
	for _, r := range roots {
		out = append(out, parts[r])
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].Ops) > len(out[j].Ops) })
	return out
}
