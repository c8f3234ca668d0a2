package dsl

import (
	"fmt"

	"github.com/psgraph/psgraph/dsl/ops"
)

// A model's own state: state variables that forward ops read and update
// (batch_norm's running statistics), as opposed to an optimizer's.

// ModelState lists, in declaration order, the state variables that forward
// ops read and that belong to no parameter (no of:, unlike an optimizer's
// state): batch_norm's running statistics, a model's own counters. They
// are part of a trained model as its parameters are: --save writes them,
// and eval and predict read them.
func (g *Graph) ModelState() []string {
	read := map[string]bool{}
	for _, op := range g.Ops {
		if op.Section == Forward {
			for _, in := range op.Inputs {
				read[in] = true
			}
		}
	}
	var out []string
	for _, n := range g.Order {
		if v := g.Vars[n]; v.Kind == KindState && v.Of == "" && read[n] {
			out = append(out, n)
		}
	}
	return out
}

// typeOf is the shape of a variable once the graph is checked ("" before).
func (g *Graph) typeOf(name string) string {
	if t, ok := g.Types[name]; ok {
		return t.Shape.String()
	}
	return "[C]"
}

// Persistent lists, in declaration order, every variable whose value
// lives from step to step: parameters and state, the optimizers' included.
func (g *Graph) Persistent() []string {
	var out []string
	for _, n := range g.Order {
		if g.Vars[n].Kind.Persistent() {
			out = append(out, n)
		}
	}
	return out
}

// Normalizes says whether the model's data section normalizes its
// features (whose statistics a saved model carries).
func (g *Graph) Normalizes() bool {
	return g.Data != nil && g.Data.Normalize != "" && g.Data.Normalize != "none"
}

// ModelVars is Params followed by ModelState: what a saved model holds.
func (g *Graph) ModelVars() []string { return append(g.Params(), g.ModelState()...) }

// checkUpdates checks the ops that compute the next value of a state
// variable they read (ops.Def.Updates): that input must be a state
// variable, and the op's output assigned to it.
func (g *Graph) checkUpdates() ErrorList {
	var errs ErrorList
	var assigned map[string]Assign
	for _, op := range g.Ops {
		def, _ := ops.Lookup(op.Type)
		if def == nil || len(def.Updates) == 0 {
			continue
		}
		if assigned == nil {
			assigned = make(map[string]Assign, len(g.Assigns))
			for _, a := range g.Assigns {
				assigned[a.Target] = a
			}
		}
		for _, u := range def.Updates {
			if u.In >= len(op.Inputs) || u.Out >= len(op.Outputs) {
				continue // the arity check reported it
			}
			in, next := op.Inputs[u.In], op.Outputs[u.Out]
			role := def.Inputs[u.In]
			write := fmt.Sprintf("assign: {%s: %s}", in, next)
			v := g.Vars[in]
			if v == nil || v.Kind != KindState {
				fix := fmt.Sprintf("declare a state variable of %s's shape %s, read it here and assign it %s", next, g.typeOf(next), next)
				what := "an op's output"
				switch {
				case v != nil && v.Kind == KindParam:
					what, fix = "a param, which the optimizer would train", fmt.Sprintf("move %s from params: to state: and write %s", in, write)
				case v != nil:
					what = "a " + v.Kind.String() + " variable"
				}
				errs = append(errs, Errorf(op.Pos, "op %s reads its %s from %q, %s; it must be state, which persists across steps untrained: %s", op.Type, role, in, what, fix))
				continue
			}
			a, ok := assigned[in]
			switch {
			case !ok:
				errs = append(errs, Errorf(op.Pos, "op %s computes the next value of state %q as %q, but nothing assigns it, so %s would never change; write %s", op.Type, in, next, in, write))
			case a.Value != next:
				errs = append(errs, Errorf(a.Pos, "state %q is assigned %q, but op %s at %s computes its next value as %q; write %s", in, a.Value, op.Type, op.Pos, next, write))
			}
		}
	}
	return errs
}
