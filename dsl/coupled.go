package dsl

import (
	"fmt"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
)

// Coupling is where the rows of a batch meet in a model's forward pass:
// the first variable, in dependency order, whose values depend on rows
// other than their own.
type Coupling struct {
	Var string
	Pos Pos    // the op computing Var
	Why string // "scores is [batch, batch]"
}

// Coupled reports where the value of name (a loss or a metric) depends on
// which rows are batched together, nil when it does not: when it is a
// mean of per-row terms, any batch size gives it the same expectation,
// but a loss over in-batch negatives ranks each row against the items of
// its own batch, so its value changes with the batch size. It infers the
// forward ops at a batch size no width of the model equals and follows
// the values computed from the data: a value whose batch axis is not its
// first or appears twice (scores [batch, batch], counts [1, batch]), or
// one that puts a value computed over all the rows (a reduction along
// the batch axis) back into each row, couples the rows, and so does
// everything computed from it. A reduction over the rows that ends a
// computation (the mean of a per-row loss, auc) does not. Ops that couple
// rows without changing shapes (batch_norm in training) are not seen;
// evaluation runs batch_norm with its running statistics.
func (g *Graph) Coupled(name string) (*Coupling, error) {
	order, err := g.checkStructure()
	if err != nil {
		return nil, err
	}
	sym := g.symbolicBatch(max(g.Batch(), 1))
	types := make(map[string]ops.Type, len(g.Vars)+len(g.Ops))
	dep := map[string]bool{} // computed from the data
	for _, n := range g.Order {
		v := g.Vars[n]
		types[n] = g.varType(v, sym)
		dep[n] = v.Kind == KindData
	}
	coupled := map[string]*Coupling{}
	for _, i := range order {
		op := g.Ops[i]
		if op.Section != Forward {
			continue
		}
		if err := inferOp(op, types, sym); err != nil {
			return nil, err
		}
		var inherited *Coupling
		inDep, reduced := false, ""
		for _, in := range op.Inputs {
			if c := coupled[in]; c != nil && inherited == nil {
				inherited = c
			}
			if dep[in] {
				inDep = true
				if batchAxes(types[in].Shape, sym) == 0 && reduced == "" {
					reduced = in
				}
			}
		}
		for _, o := range op.Outputs {
			dep[o] = inDep
			if types[o].Sparse() {
				// A split trainer's fetched table rows (fetch_rows,
				// fetch_tables): the table's values at the batch's ids,
				// which a lookup reads row by row, not a value computed
				// over the rows.
				dep[o] = false
				continue
			}
			s := types[o].Shape
			n := batchAxes(s, sym)
			switch {
			case inherited != nil:
				coupled[o] = inherited
			case !inDep || n == 0:
			case n > 1 || s[0] != sym:
				coupled[o] = &Coupling{Var: o, Pos: op.Pos, Why: fmt.Sprintf("%s is %v", o, symbolic(s, sym))}
			case reduced != "":
				coupled[o] = &Coupling{Var: o, Pos: op.Pos, Why: fmt.Sprintf("%s puts %s, computed over all the batch's rows, into each row", o, reduced)}
			}
		}
	}
	return coupled[name], nil
}

// batchAxes counts the axes of s of the symbolic batch size sym.
func batchAxes(s ir.Shape, sym int) int {
	n := 0
	for _, d := range s {
		if d == sym {
			n++
		}
	}
	return n
}
