package dsl

import (
	"container/heap"
	"fmt"
	"slices"
	"strconv"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
)

// Producers maps each op output to the index of the op producing it.
func (g *Graph) Producers() map[string]int {
	p := make(map[string]int, len(g.Ops))
	for i, op := range g.Ops {
		for _, o := range op.Outputs {
			p[o] = i
		}
	}
	return p
}

// ComputedFrom reports whether variable v is computed, through the ops of
// g, from a variable for which from is true (v itself counts); prod is
// g.Producers().
func (g *Graph) ComputedFrom(prod map[string]int, v string, from func(string) bool) bool {
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(x string) bool {
		if from(x) {
			return true
		}
		if seen[x] {
			return false
		}
		seen[x] = true
		i, ok := prod[x]
		if !ok {
			return false
		}
		for _, in := range g.Ops[i].Inputs {
			if walk(in) {
				return true
			}
		}
		return false
	}
	return walk(v)
}

// checkStructure validates names, arity and single assignment, and returns
// the ops in a dependency order.
func (g *Graph) checkStructure() ([]int, error) {
	var errs ErrorList
	// prod maps each name a step defines to the op computing it, or to -1
	// for a declared variable: one lookup answers for every input.
	prod := make(map[string]int, len(g.Vars)+len(g.Ops))
	for n := range g.Vars {
		prod[n] = -1
	}
	for i, op := range g.Ops {
		def, _ := ops.Lookup(op.Type)
		lo, hi := def.NumInputs()
		if len(op.Inputs) < lo || (hi >= 0 && len(op.Inputs) > hi) {
			want := plural(lo, "input")
			if hi != lo {
				want = fmt.Sprintf("%d to %d inputs", lo, hi)
				if hi < 0 {
					want = fmt.Sprintf("at least %s", plural(lo, "input"))
				}
			}
			hint := ""
			for _, in := range op.Inputs {
				if h := inputHint(def, in, nil); h != "" {
					hint = h
					break
				}
			}
			errs = append(errs, Errorf(op.Pos, "op %s takes %s %v, got %d%s", op.Type, want, def.Inputs, len(op.Inputs), hint))
		}
		if !def.OutputsOK(len(op.Outputs)) {
			errs = append(errs, Errorf(op.Pos, "op %s has %s %v, got %d", op.Type, plural(len(def.Outputs), "output"), def.Outputs, len(op.Outputs)))
		}
		for _, o := range op.Outputs {
			switch j, ok := prod[o]; {
			case !ok:
				prod[o] = i
			case j < 0:
				v := g.Vars[o]
				errs = append(errs, Errorf(op.Pos, "op %s output %q is already declared as a %s at %s; a step assigns each name once (use assign: for the next step's value)", op.Type, o, v.Kind, v.Pos))
			default:
				errs = append(errs, Errorf(op.Pos, "op %s output %q is already produced by op %s at %s; each name is assigned once per step", op.Type, o, g.Ops[j].Type, g.Ops[j].Pos))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	// Every input is defined; ops written in dependency order (as Marshal
	// writes them, and most models are) keep file order: Kahn's algorithm
	// below, with ties resolved by file order, yields exactly that order
	// for them.
	var known []string // the names for "did you mean", on the first error
	inOrder := true
	for i, op := range g.Ops {
		for _, in := range op.Inputs {
			j, ok := prod[in]
			switch {
			case !ok:
				if known == nil {
					known = keys(prod)
				}
				def, _ := ops.Lookup(op.Type)
				errs = append(errs, Errorf(op.Pos, "op %s input %q is not defined%s", op.Type, in, inputHint(def, in, known)))
			case j >= i:
				inOrder = false
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if errs = g.checkDynamicReaders(); len(errs) > 0 {
		return nil, errs
	}
	if inOrder {
		order := make([]int, len(g.Ops))
		for i := range order {
			order[i] = i
		}
		return order, nil
	}
	// Kahn's algorithm; ties resolved by file order so the order is stable.
	indeg := make([]int, len(g.Ops))
	users := make([][]int, len(g.Ops))
	for i, op := range g.Ops {
		for _, in := range op.Inputs {
			if j := prod[in]; j >= 0 {
				indeg[i]++
				users[j] = append(users[j], i)
			}
		}
	}
	order := make([]int, 0, len(g.Ops))
	ready := &intHeap{}
	for i := range g.Ops {
		if indeg[i] == 0 {
			heap.Push(ready, i)
		}
	}
	for ready.Len() > 0 {
		i := heap.Pop(ready).(int)
		order = append(order, i)
		for _, u := range users[i] {
			if indeg[u]--; indeg[u] == 0 {
				heap.Push(ready, u)
			}
		}
	}
	if len(order) < len(g.Ops) {
		for i := range g.Ops {
			if indeg[i] > 0 {
				op := g.Ops[i]
				return nil, Errorf(op.Pos, "op %s (outputs %v) is part of a cycle: an op's inputs must not depend on its outputs within a step", op.Type, op.Outputs)
			}
		}
	}
	return order, nil
}

// intHeap is a min-heap of op indices: the ready op first in file order.
type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Order returns the ops in dependency order (ties by file order).
func (g *Graph) TopoOrder() ([]int, error) { return g.checkStructure() }

// Infer computes the type of every variable for a batch size.
func (g *Graph) Infer(batch int) (map[string]ops.Type, error) {
	types, _, err := g.infer(batch, 0)
	return types, err
}

// infer is Infer that also returns the ops' dependency order; room
// presizes the map for that many more names (the expansion's).
func (g *Graph) infer(batch, room int) (map[string]ops.Type, []int, error) {
	order, err := g.checkStructure()
	if err != nil {
		return nil, nil, err
	}
	types := make(map[string]ops.Type, len(g.Vars)+len(g.Ops)+room)
	for _, name := range g.Order {
		types[name] = g.varType(g.Vars[name], batch)
	}
	for _, i := range order {
		if err := g.labelFits(g.Ops[i]); err != nil {
			return nil, nil, err
		}
		if err := inferOp(g.Ops[i], types, batch); err != nil {
			return nil, nil, err
		}
	}
	return types, order, nil
}

// inferKnown is Infer for a graph that only grew since known was inferred
// at this batch (autodiff and the optimizer append ops and state): the
// structure is checked whole, but only the ops whose outputs known lacks
// are inferred. known is extended and returned.
func (g *Graph) inferKnown(batch int, known map[string]ops.Type) (map[string]ops.Type, error) {
	order, err := g.checkStructure()
	if err != nil {
		return nil, err
	}
	for _, name := range g.Order {
		if _, ok := known[name]; !ok {
			known[name] = g.varType(g.Vars[name], batch)
		}
	}
	for _, i := range order {
		op := g.Ops[i]
		if len(op.Outputs) > 0 {
			if _, ok := known[op.Outputs[0]]; ok {
				continue
			}
		}
		if err := inferOp(op, known, batch); err != nil {
			return nil, err
		}
	}
	return known, nil
}

// labelOps are the ops that read the data label, by the label dtype they
// take: class ids (int32) or float targets (float32).
var labelOps = map[string]bool{
	"softmax_cross_entropy": false, "accuracy": false,
	"sigmoid_cross_entropy": true, "mse": true, "mae": true, "rmse": true,
}

// labelFits refuses a loss or metric that reads the data label with the
// wrong dtype, saying which label spec to write (TestLossRefusesLabelDType).
func (g *Graph) labelFits(op *Op) error {
	wantFloat, ok := labelOps[op.Type]
	if !ok || g.Data == nil || g.Data.Label == nil || len(op.Inputs) < 2 || op.Inputs[1] != g.Data.Label.Name {
		return nil
	}
	c := g.Data.Label
	if c.Float == wantFloat {
		return nil
	}
	col := c.colsText()
	one := col
	if len(c.refs) > 0 {
		one = "column: " + c.refs[0].text()
	} else if len(c.Cols) > 0 {
		one = fmt.Sprintf("column: %d", c.Cols[0])
	}
	if wantFloat {
		return Errorf(op.Pos, "op %s reads %q, the data label, as its target, but the label is int32 class ids (data.label at %s); %s needs float32 targets: write label: {name: %s, %s, dtype: float32} in data", op.Type, c.Name, c.Pos, op.Type, YAMLString(c.Name), col)
	}
	return Errorf(op.Pos, "op %s reads %q, the data label, as class ids, but the label is float32 targets (data.label at %s has dtype: float32); %s needs int32 class ids [batch]: write label: {name: %s, %s} in data (without dtype), or use sigmoid_cross_entropy or mse for float targets", op.Type, c.Name, c.Pos, op.Type, YAMLString(c.Name), one)
}

func (g *Graph) varType(v *Var, batch int) ops.Type {
	s := v.Shape.Clone()
	for i, d := range s {
		if d < 0 {
			s[i] = batch
		}
	}
	return ops.Type{DType: v.DType, Shape: s}
}

// inferOp checks one op against the catalog and records its output types.
func inferOp(op *Op, types map[string]ops.Type, batch int) error {
	_, err := inferKnownOp(op, types, batch, false)
	return err
}

// inferKnownOp is inferOp; with known, an input types lacks makes it
// return false (and nothing else) instead of reading a zero type.
func inferKnownOp(op *Op, types map[string]ops.Type, batch int, known bool) (bool, error) {
	in := make([]ops.Type, len(op.Inputs))
	for i, name := range op.Inputs {
		t, ok := types[name]
		if !ok && known {
			return false, nil
		}
		in[i] = t
	}
	out, err := inferOpTypes(op, in, batch)
	if err != nil {
		return true, Errorf(op.Pos, "op %s %s: %v", op.Type, describeInputs(op.Inputs, in), err)
	}
	for i, o := range op.Outputs {
		if out[i].Sparse() && out[i].RowSet == "" {
			out[i].RowSet = o // the op makes a row set of its own
		}
		types[o] = out[i]
	}
	return true, nil
}

// inferOpTypes is the catalog's answer for one op of input types in: its
// output types, or the rule's error.
func inferOpTypes(op *Op, in []ops.Type, batch int) ([]ops.Type, error) {
	def, _ := ops.Lookup(op.Type)
	attrs := op.Attrs
	if attrs.Has("shape") && batch > 0 {
		attrs = AttrsAtBatch(attrs, batch)
	}
	var out []ops.Type
	var err error
	if sparse := sparseInput(in); sparse >= 0 && !def.SparseIn {
		out, err = inferOnRows(op, def, in, attrs, sparse)
	} else {
		out, err = def.Infer(in, attrs)
	}
	return out, err
}

func sparseInput(in []ops.Type) int {
	for i, t := range in {
		if t.Sparse() {
			return i
		}
	}
	return -1
}

// inferOnRows types an op with a row-sparse input. Only element-wise ops
// take one: they run on the values of the step's rows (every row-sparse
// input must hold the same rows; a dense input must broadcast onto one
// row), and their outputs hold those rows. Anything else is refused: a
// dense op would need the whole table, which a row gradient never builds.
func inferOnRows(op *Op, def *ops.Def, in []ops.Type, attrs ops.Attrs, first int) ([]ops.Type, error) {
	sp := in[first]
	if !def.ElementWise {
		if op.Section == Optimize {
			return nil, ops.Errorf("%s holds only the rows of %s that this step touched (a row gradient: %s is read only through lookup_table or embedding_bag), and %s is not element-wise, so the optimizer cannot run on those rows alone; use an element-wise optimizer (sgd, momentum, adagrad, adam) or keep the table dense by also reading it with a dense op", op.Inputs[first], op.Param, op.Param, op.Type)
		}
		return nil, ops.Errorf("%s is row-sparse (%v) and op %s is not element-wise, so it cannot run on the rows alone; densify it first with to_dense (a [%d, ...] tensor), or gather the rows another tensor holds with gather_rows", op.Inputs[first], sp, op.Type, sp.Shape[0])
	}
	rows := make([]ops.Type, len(in))
	for i, t := range in {
		switch {
		case t.Sparse() && t.RowSet != sp.RowSet:
			return nil, ops.Errorf("%s and %s hold different rows (of %s and of %s); element-wise ops combine row-sparse values only with the same rows", op.Inputs[first], op.Inputs[i], sp.RowSet, t.RowSet)
		case t.Sparse():
			rows[i] = ops.Type{DType: t.DType, Shape: t.RowShape()}
		case len(t.Shape) >= len(sp.Shape) && t.Shape[len(t.Shape)-len(sp.Shape)] != 1:
			return nil, ops.Errorf("%s is dense %v and %s is row-sparse (%v): a dense operand must broadcast onto one row (shape %v, [1, ...] or a scalar); gather its rows with gather_rows, or densify %s with to_dense", op.Inputs[i], t, op.Inputs[first], sp, sp.Shape[1:], op.Inputs[first])
		default:
			rows[i] = t
		}
	}
	out, err := def.Infer(rows, attrs)
	if err != nil {
		return nil, err
	}
	for i, t := range out {
		// The output holds the rows of the widest row-sparse input (a
		// [V, D] gradient divided by a [V, 1] state of one value per row).
		var like *ops.Type
		for j := range in {
			if in[j].Sparse() && t.Shape.Equal(in[j].RowShape()) {
				like = &in[j]
				break
			}
		}
		if like == nil {
			return nil, ops.Errorf("output %d would be %v, not rows of %v", i, t, sp)
		}
		out[i] = ops.Type{DType: t.DType, Shape: like.Shape.Clone(), RowSet: sp.RowSet, MaxRows: sp.MaxRows}
	}
	return out, nil
}

// AttrsAtBatch replaces -1 in the shape attribute of any op by the batch
// size; shape checking and the executor's kernels both see attrs this way.
func AttrsAtBatch(a ops.Attrs, batch int) ops.Attrs {
	s := a.Ints("shape")
	neg := false
	for _, d := range s {
		neg = neg || d < 0
	}
	if !neg {
		return a
	}
	c := a.Clone()
	ns := append([]int{}, s...)
	for i, d := range ns {
		if d < 0 {
			ns[i] = batch
		}
	}
	c["shape"] = ns
	return c
}

func describeInputs(names []string, types []ops.Type) string {
	s := "("
	for i, n := range names {
		if i > 0 {
			s += ", "
		}
		s += n + " " + types[i].String()
	}
	return s + ")"
}

// Check validates a whole graph at its training batch and records types.
func (g *Graph) Check() error {
	batch := g.Batch()
	if batch == 0 {
		batch = 1
	}
	types, order, err := g.infer(batch, 0)
	if err != nil {
		return err
	}
	if err := g.checkSymbolicBatch(order, types, batch); err != nil {
		return err
	}
	return g.checkTypes(types, batch)
}

// checkTypes is Check given the graph's types at batch.
func (g *Graph) checkTypes(types map[string]ops.Type, batch int) error {
	g.Types = types
	errs := g.checkTrain(types)
	errs = append(errs, g.checkSizes(types, batch)...)
	errs = append(errs, g.checkUpdates()...)
	errs = append(errs, g.checkTableRows(types)...)
	for _, a := range g.Assigns {
		v, ok := g.Vars[a.Target]
		switch {
		case !ok:
			errs = append(errs, Errorf(a.Pos, "assign target %q is not a declared param or state variable%s; declare it under params: or state:", a.Target, suggest(a.Target, g.Persistent())))
			continue
		case !v.Kind.Persistent():
			errs = append(errs, Errorf(a.Pos, "assign target %q is a %s variable; only params and state persist across steps, so assign to one of those", a.Target, v.Kind))
			continue
		}
		vt, ok := types[a.Value]
		if !ok {
			errs = append(errs, Errorf(a.Pos, "assign value %q is not defined%s; it must be a variable or an op output", a.Value, suggest(a.Value, keys(types))))
			continue
		}
		if tt := types[a.Target]; tt.Sparse() || !tt.Shape.Equal(vt.Shape) || tt.DType != vt.DType {
			errs = append(errs, Errorf(a.Pos, "assign %s = %s: %s is %v but %s is %v; the next value must have the target's dtype and shape", a.Target, a.Value, a.Target, tt, a.Value, vt))
		}
	}
	seen := map[string]bool{}
	for _, a := range g.Assigns {
		if seen[a.Target] {
			errs = append(errs, Errorf(a.Pos, "%q is assigned twice; a persistent variable takes one next value per step", a.Target))
		}
		seen[a.Target] = true
	}
	return errs.Err()
}

// idsPassThrough are the ops whose int32 output holds only values of
// their inputs (rearranged), so ids keep their bound through them.
var idsPassThrough = map[string]bool{"reshape": true, "slice_rows": true, "identity": true, "transpose": true, "concat": true}

// checkTableRows refuses a table read through data ids that can exceed
// its rows: an op with a `table` and an `ids` input (lookup_table, and a
// pooled lookup alike) whose ids come, directly or through ops that only
// rearrange them, from an ids spec of hash_buckets or num_ids N, when the
// table has fewer than N rows (dsl/testdata/errors table_smaller_than_buckets*).
func (g *Graph) checkTableRows(types map[string]ops.Type) ErrorList {
	if g.Data == nil {
		return nil
	}
	from := map[string]*Column{} // an int32 value -> the ids spec bounding it
	for _, c := range g.Data.IDs {
		if c.IDBound() > 0 {
			from[c.Name] = c
		}
	}
	if len(from) == 0 {
		return nil
	}
	for changed := true; changed; { // ops need not be in dependency order
		changed = false
		for _, op := range g.Ops {
			if !idsPassThrough[op.Type] || len(op.Outputs) != 1 || from[op.Outputs[0]] != nil {
				continue
			}
			var c *Column
			for _, in := range op.Inputs {
				ci := from[in]
				if ci == nil {
					c = nil
					break
				}
				if c == nil || ci.IDBound() > c.IDBound() {
					c = ci
				}
			}
			if c != nil {
				from[op.Outputs[0]], changed = c, true
			}
		}
	}
	var errs ErrorList
	for _, op := range g.Ops {
		def, ok := ops.Lookup(op.Type)
		if !ok || op.Section != Forward {
			continue
		}
		ti, ii := slices.Index(def.Inputs, "table"), slices.Index(def.Inputs, "ids")
		if ti < 0 || ii < 0 || ti >= len(op.Inputs) || ii >= len(op.Inputs) {
			continue
		}
		table, ids := op.Inputs[ti], op.Inputs[ii]
		c, t := from[ids], types[table]
		if c == nil || len(t.Shape) != 2 || t.Shape[0] >= c.IDBound() {
			continue
		}
		via := ""
		if ids != c.Name {
			via = fmt.Sprintf(" (from %s %q)", c.Key(), c.Name)
		}
		what, fix := fmt.Sprintf("hashed into hash_buckets: %d", c.HashBuckets), fmt.Sprintf("hash_buckets: %d", t.Shape[0])
		if c.HashBuckets == 0 {
			what, fix = fmt.Sprintf("integers below num_ids: %d", c.NumIDs), fmt.Sprintf("num_ids: %d if no id is larger", t.Shape[0])
		}
		errs = append(errs, Errorf(op.Pos, "op %s reads table %q %v through ids %q%s, %s (%s at %s): an id of %d or more would read a row the table does not have; give %q at least %d rows, shape [%d, %d], or set %s", op.Type, table, t.Shape, ids, via, what, c.Key(), c.Pos, t.Shape[0], table, c.IDBound(), c.IDBound(), t.Shape[1], fix))
	}
	return errs
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// checkTrain checks that train.loss is a defined float32 scalar and every
// metric a defined scalar.
func (g *Graph) checkTrain(types map[string]ops.Type) ErrorList {
	t := g.Train
	if t == nil {
		return nil
	}
	var errs ErrorList
	if t.Loss != "" {
		pos := t.LossPos
		if pos.Line == 0 {
			pos = t.Pos
		}
		if lt, ok := types[t.Loss]; !ok {
			errs = append(errs, Errorf(pos, "train.loss %q is not defined%s; name an op output", t.Loss, suggest(t.Loss, keys(types))))
		} else if len(lt.Shape) != 0 || lt.DType != ir.F32 {
			errs = append(errs, Errorf(pos, "train.loss %q must be a float32 scalar, got %v (reduce it with mean or sum)", t.Loss, lt))
		}
	}
	for i, m := range t.Metrics {
		pos := t.Pos
		if i < len(t.MetricPos) {
			pos = t.MetricPos[i]
		}
		if mt, ok := types[m]; !ok {
			errs = append(errs, Errorf(pos, "train.metrics: %q is not defined%s; name an op output", m, suggest(m, keys(types))))
		} else if len(mt.Shape) != 0 {
			errs = append(errs, Errorf(pos, "train.metrics: %q must be a scalar, got %v (reduce it with mean)", m, mt))
		}
	}
	return errs
}

// MaxElements bounds the elements of any one tensor (8 GiB of float32), so
// that a mistyped shape or batch is an error here rather than a failed
// allocation at run time.
const MaxElements = 1 << 31

// dynamicShape reports whether s is a dynamic table's (or its state's, or
// its rows'): rows that exist only for the keys admitted, never allocated whole.
func dynamicShape(s ir.Shape) bool { return len(s) > 0 && s[0] == ir.DynamicRows }

// numel returns the element count of s, or -1 when it exceeds MaxElements.
func numel(s ir.Shape) int {
	n := 1
	for _, d := range s {
		if d < 0 {
			return -1
		}
		if d != 0 && n > MaxElements/d {
			return -1
		}
		n *= d
	}
	return n
}

// checkSizes reports variables larger than MaxElements at the training batch.
func (g *Graph) checkSizes(types map[string]ops.Type, batch int) ErrorList {
	// One pass over the map, in its memory order, finds whether any name
	// is too big; the lookups in declaration and op order (one cache miss
	// each in a large graph) only say which comes first.
	tooBig := false
	for _, t := range types {
		if numel(t.Shape) < 0 && !dynamicShape(t.Shape) {
			tooBig = true
			break
		}
	}
	if !tooBig {
		return nil
	}
	var errs ErrorList
	big := func(pos Pos, what string, t ops.Type) {
		errs = append(errs, Errorf(pos, "%s is %v at batch %d, more than %d elements; check the shape and train.batch", what, t.Shape, batch, MaxElements))
	}
	for _, name := range g.Order {
		if t := types[name]; numel(t.Shape) < 0 && !dynamicShape(t.Shape) {
			big(g.Vars[name].Pos, fmt.Sprintf("%s %q", g.Vars[name].Kind, name), t)
		}
	}
	for _, op := range g.Ops {
		for _, o := range op.Outputs {
			if t := types[o]; numel(t.Shape) < 0 && !dynamicShape(t.Shape) {
				big(op.Pos, fmt.Sprintf("op %s output %q", op.Type, o), t)
				return errs
			}
		}
	}
	return errs
}

// inputHint explains an undefined input: a number or the name of one of
// the op's attributes is a hyper-parameter, which goes under attrs; else
// the closest defined name.
func inputHint(d *ops.Def, in string, known []string) string {
	if _, err := strconv.ParseFloat(in, 64); err == nil {
		return fmt.Sprintf("; inputs name variables, and %s is a number: a hyper-parameter goes under attrs (psgraph ops lists each op's)", in)
	}
	if d != nil {
		for _, a := range d.Attrs {
			if a.Name == in {
				return fmt.Sprintf("; %s is an attribute of %s, not an input: write attrs: {%s: ...}", in, d.Name, in)
			}
		}
	}
	return suggest(in, known)
}

// plural writes n and the noun, singular for 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
