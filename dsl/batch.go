package dsl

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
)

// The batch is symbolic in shape checking: shapes are inferred at the
// training batch, and the forward ops again at a batch size that no width
// of the model equals. An op whose shapes line up at the first size but not
// at the second lines up only because the batch equals one of its widths:
// `sub(h [batch, 8], mean(h, axis 1) [batch])` broadcasts the row means
// along the feature axis when the batch is 8, computing the wrong thing,
// and fails at any other batch (eval, predict, --batch).

// symbolicBatchStart is where the search for a batch size no width of the
// model equals starts: a size no model declares by accident.
const symbolicBatchStart = 1000003

// checkSymbolicBatch infers the forward ops of g (in dependency order)
// again at a batch size that equals no dimension or integer attribute of
// the model, and reports the first op that fails there, saying what to
// write. types are the graph's types at batch: an op that reads no value
// of the batch's size and has no -1 in a shape keeps its types, so only
// the names that depend on the batch are inferred again.
func (g *Graph) checkSymbolicBatch(order []int, types map[string]ops.Type, batch int) error {
	return g.symbolicBatchCheck(batch)(order, types)
}

// symbolicBatchCheck is checkSymbolicBatch with the symbolic batch chosen
// (and the graph's dependence on the batch decided) now, from the graph
// as it is: the check it returns gives the same answer after autodiff and
// the optimizer have appended their ops, variables and types (it reads
// the variables declared now and the forward ops of order, whose types
// those leave as they are), so Expand runs it beside the final checks.
func (g *Graph) symbolicBatchCheck(batch int) func(order []int, types map[string]ops.Type) error {
	if !g.dependsOnBatch() {
		return func([]int, map[string]ops.Type) error { return nil }
	}
	sym := g.symbolicBatch(batch)
	declared := g.Order[:len(g.Order):len(g.Order)]
	return func(order []int, types map[string]ops.Type) error {
		return g.probeSymbolicBatch(declared, order, types, batch, sym)
	}
}

// probeSymbolicBatch infers the forward ops of order again at the
// symbolic batch sym (checkSymbolicBatch); declared are the variables.
func (g *Graph) probeSymbolicBatch(declared []string, order []int, types map[string]ops.Type, batch, sym int) error {
	probe := map[string]ops.Type{} // the names whose types change with the batch
	for _, name := range declared {
		if v := g.Vars[name]; v.Kind == KindData || hasBatchDim(v.Shape) {
			probe[name] = g.varType(v, sym)
		}
	}
	var in []ops.Type
	for _, i := range order {
		op := g.Ops[i]
		if op.Section != Forward {
			continue
		}
		in = in[:0]
		changed, known := hasBatchDim(op.Attrs.Ints("shape")), true
		for _, name := range op.Inputs {
			t, ok := probe[name]
			if ok {
				changed = true
			} else if t, ok = types[name]; !ok {
				known = false // an input the check does not follow
			}
			in = append(in, t)
		}
		if !changed || !known {
			continue
		}
		out, err := inferOpTypes(op, in, sym)
		if err != nil {
			return g.batchTrap(op, in, sym, batch, err)
		}
		for j, o := range op.Outputs {
			probe[o] = out[j]
		}
	}
	return nil
}

// hasBatchDim reports whether a shape (of a declaration or attribute)
// holds the batch, -1.
func hasBatchDim(s []int) bool {
	for _, d := range s {
		if d < 0 {
			return true
		}
	}
	return false
}

// dependsOnBatch reports whether any shape depends on the batch: a data
// variable, or a shape attribute with -1.
func (g *Graph) dependsOnBatch() bool {
	for _, v := range g.Vars {
		if v.Kind == KindData || hasBatchDim(v.Shape) {
			return true
		}
	}
	for _, op := range g.Ops {
		if hasBatchDim(op.Attrs.Ints("shape")) {
			return true
		}
	}
	return false
}

// symbolicBatch returns a batch size that equals neither batch nor any
// declared dimension or integer attribute of the model.
func (g *Graph) symbolicBatch(batch int) int {
	used := map[int]bool{batch: true}
	for _, v := range g.Vars {
		for _, d := range v.Shape {
			used[d] = true
		}
	}
	for _, op := range g.Ops {
		for _, a := range op.Attrs {
			switch v := a.(type) {
			case int:
				used[v] = true
			case []int:
				for _, d := range v {
					used[d] = true
				}
			}
		}
	}
	s := symbolicBatchStart
	for used[s] {
		s += 2
	}
	return s
}

// batchTrap is the error for op, whose input types at the symbolic batch
// sym are in and whose rule refused them with err.
func (g *Graph) batchTrap(op *Op, in []ops.Type, sym, batch int, err error) error {
	shown := make([]ops.Type, len(in))
	for i, t := range in {
		shown[i] = t
		shown[i].Shape = symbolic(t.Shape, sym)
	}
	where := "train.batch"
	if g.Batch() == 0 {
		where = "the batch (the model has no train.batch)"
	}
	head := fmt.Sprintf("op %s %s", op.Type, describeInputs(op.Inputs, shown))
	if len(in) == 2 && in[0].DType == ir.F32 && in[1].DType == ir.F32 {
		if m, o, ax, w, ok := misaligned(in[0].Shape, in[1].Shape, sym); ok {
			mn, on := op.Inputs[m], op.Inputs[o]
			why := fmt.Sprintf("%s is 1, which stretches to any width; at another batch (--batch, eval, predict) the op fails", where)
			if batch == w {
				why = fmt.Sprintf("%s is %d too; at another batch (--batch, eval, predict) the op fails, and at this one %s's values spread along %s's axis %d instead of its rows", where, w, mn, on, ax)
			}
			return Errorf(op.Pos, "%s: %s's batch axis lines up with axis %d of %s (%d entries), so the shapes broadcast only because %s. %s",
				head, mn, ax, on, w, why, g.alignHint(mn, shown[m].Shape))
		}
	}
	msg := numbers.ReplaceAllStringFunc(err.Error(), func(n string) string {
		v, _ := strconv.Atoi(n)
		switch {
		case v == sym:
			return "batch"
		case v > 0 && v%sym == 0:
			return strconv.Itoa(v/sym) + "·batch"
		}
		return n
	})
	hint := "make its inputs agree whatever the batch size"
	if op.Attrs.Has("shape") {
		hint = "write -1 for the batch in its shape attribute, or make its inputs agree whatever the batch size"
	}
	return Errorf(op.Pos, "%s: its shapes fit only at %s (%d): at another batch (--batch, eval, predict) it fails: %s; %s", head, where, batch, msg, hint)
}

// misaligned finds, in two shapes that do not broadcast at the symbolic
// batch sym, a batch axis of one (m) aligned (numpy's trailing alignment)
// with axis ax of the other (o), of width w that is neither 1 nor the
// batch.
func misaligned(a, b ir.Shape, sym int) (m, o, ax, w int, ok bool) {
	shapes := [2]ir.Shape{a, b}
	for k := 1; k <= min(len(a), len(b)); k++ {
		da, db := a[len(a)-k], b[len(b)-k]
		for x := range 2 {
			dm, do := da, db
			if x == 1 {
				dm, do = db, da
			}
			if dm == sym && do != sym && do != 1 {
				other := shapes[1-x]
				return x, 1 - x, len(other) - k, do, true
			}
		}
	}
	return 0, 0, 0, 0, false
}

// alignHint says how to give name, of shape s at the symbolic batch, its
// batch axis back: keepdims on the reduction that dropped an axis, else a
// reshape.
func (g *Graph) alignHint(name string, s ir.Shape) string {
	for _, op := range g.Ops {
		if len(op.Outputs) == 0 || op.Outputs[0] != name {
			continue
		}
		switch op.Type {
		case "sum", "mean", "reduce_max", "logsumexp":
			if op.Attrs.Has("axis") && !op.Attrs.Bool("keepdims") {
				kept := append(s[:0:0], s...)
				ax := ops.NormAxis(op.Attrs.Int("axis"), len(s)+1)
				kept = append(kept[:ax], append(ir.Shape{1}, kept[ax:]...)...)
				return fmt.Sprintf("%s is the %s along axis %d at %s, which drops that axis: write keepdims: true there, so that %s is %v and lines up row by row", name, op.Type, op.Attrs.Int("axis"), op.Pos, name, kept)
			}
		}
		break
	}
	if len(s) == 1 {
		return fmt.Sprintf("Make %s [batch, 1] (reshape with shape: [-1, 1], or keepdims: true on the reduction computing it) to line it up row by row", name)
	}
	return fmt.Sprintf("Line %s's batch axis up with the other's (reshape or transpose it)", name)
}

// numbers finds the integers of a message, to show multiples of the
// symbolic batch as such.
var numbers = regexp.MustCompile(`[0-9]+`)

// symbolic returns s with the symbolic batch shown as the batch.
func symbolic(s ir.Shape, sym int) ir.Shape {
	out := s.Clone()
	for i, d := range out {
		if d == sym {
			out[i] = -1 // String shows "batch"
		}
	}
	return out
}
