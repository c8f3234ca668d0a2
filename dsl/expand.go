package dsl

import (
	"runtime"

	"github.com/psgraph/psgraph/dsl/ops"
)

// speculate lets Expand build the optimizer's ops while autodiff runs
// (tests turn it off to compare with the sequential expansion).
var speculate = true

// speculationKept, when set (by tests), hears whether Expand kept a
// speculative expansion.
var speculationKept func(bool)

// Expand generates the backward pass and optimizer ops (when the graph is
// not expanded yet) and checks the result.
//
// On a large model most of the work is autodiff, the optimizer's ops (a
// few per parameter) and their types. The second does not depend on the
// first when every parameter gets a dense gradient of its own type, as in
// any model without lookup tables: so Expand builds and types the
// optimizer's ops on another core while autodiff runs, assuming that, and
// keeps them only when autodiff's gradients bear the assumption out; else
// it expands the optimizer again after autodiff (TestExpandSpeculationEqualsSequential).
func (g *Graph) Expand() error {
	if g.Expanded() {
		if g.Train != nil && g.Train.Optimizer != nil {
			return Errorf(g.Train.Optimizer.Pos, "this model already holds backward/optimize ops, so it must not name an optimizer")
		}
		if own := g.ParamOptimizers(); len(own) > 0 {
			return Errorf(g.Vars[own[0]].Optimizer.Pos, "this model already holds backward/optimize ops, so parameter %s must not name an optimizer", own[0])
		}
		if g.Train != nil && g.Train.Clip != nil {
			return Errorf(g.Train.Clip.Pos, "this model already holds backward/optimize ops, so it must not name train.clip (clip them in the model it was generated from)")
		}
		return g.Check()
	}
	batch := max(g.Batch(), 1)
	t := g.Train
	hasOpt := g.HasOptimizer()
	room := 0
	if hasOpt {
		room = 5 * len(g.Ops) // backward and optimizer ops, about
	}
	known := t != nil && batch == g.Batch() // Infer's types are those Differentiate would infer again
	var spec chan *speculated
	if known && hasOpt && t.Loss != "" && speculate && runtime.GOMAXPROCS(0) > 1 &&
		!hasOpThat(g, ops.ReadsTable) && (t.Clip == nil || t.Clip.Norm == 0) {
		spec = make(chan *speculated, 1)
		params := g.Params()
		go func() { spec <- g.speculateOptimizer(params, batch) }()
		defer func() { // an error before autodiff's end: it only reads g
			if spec != nil {
				<-spec
			}
		}()
	}
	types, order, err := g.infer(batch, room)
	if err != nil {
		return err
	}
	if errs := g.checkTrain(types); len(errs) > 0 {
		return errs
	}
	if !hasOpt {
		return g.Check()
	}
	if t == nil || t.Loss == "" {
		pos := Pos{File: g.File}
		if t != nil && t.Optimizer != nil {
			pos = t.Optimizer.Pos
		} else if own := g.ParamOptimizers(); len(own) > 0 {
			pos = g.Vars[own[0]].Optimizer.Pos
		}
		if t == nil {
			return Errorf(pos, "an optimizer needs a train section with loss (the scalar to minimize) and batch")
		}
		return Errorf(pos, "train needs loss (the scalar to minimize) when it names an optimizer")
	}
	// The forward ops at a symbolic batch: checked now, or, when the
	// speculated expansion may be kept, beside the final checks (autodiff
	// and the expansion leave what it reads as it is); its errors come
	// first either way.
	symbolic := g.symbolicBatchCheck(batch)
	if spec == nil {
		if err := symbolic(order, types); err != nil {
			return err
		}
		symbolic = nil
	}
	if known {
		err = g.differentiate(types, order)
	} else {
		err = g.Differentiate()
	}
	var sx *speculated
	if spec != nil {
		sx = <-spec
		spec = nil
	}
	kept := err == nil && sx.fits(g, types)
	if symbolic != nil && !kept {
		if serr := symbolic(order, types); serr != nil {
			return serr
		}
	}
	if err != nil {
		return err
	}
	if sx != nil && speculationKept != nil {
		speculationKept(kept)
	}
	if kept {
		sx.x.apply(g)
		// The structure and symbolic batch checks only read the graph
		// (the latter its types too, once merged): they run beside the
		// type merge and checks, and their errors come first, as they do
		// in the sequential expansion.
		merged := make(chan struct{})
		structure := make(chan error, 1)
		go func() {
			_, err := g.checkStructure()
			<-merged
			if serr := symbolic(order, types); serr != nil {
				err = serr
			}
			structure <- err
		}()
		for _, n := range sx.types {
			types[n.name] = n.t
		}
		close(merged)
		err := g.checkTypes(types, batch)
		if serr := <-structure; serr != nil {
			return serr
		}
		return err
	}
	if err := g.ExpandOptimizer(); err != nil {
		return err
	}
	// The graph only grew: infer just the new ops (a row gradient's
	// rewrite changes types, so a model with tables is inferred anew).
	if known && !hasOpThat(g, ops.RowGrad) {
		all, err := g.inferKnown(batch, types)
		if err != nil {
			return err
		}
		return g.checkTypes(all, batch)
	}
	return g.Check()
}

// speculated is the optimizer's expansion built before autodiff, for
// params, assuming each gets a dense gradient of its own type, and the
// types of the names it adds, in the order Expand merges them (a later
// one of a name wins).
type speculated struct {
	x      *expansion
	params []string
	types  []namedType
}

// namedType is the type of a name.
type namedType struct {
	name string
	t    ops.Type
}

// speculateOptimizer builds and types the optimizer's ops for params; nil
// when it meets an error (the sequential expansion reports it) or an op
// reading a name outside its parameter's.
func (g *Graph) speculateOptimizer(params []string, batch int) *speculated {
	x, err := g.optimizerOps(params, nil)
	if err != nil {
		return nil
	}
	types, ok := g.inferByParam(x, batch)
	if !ok {
		types, ok = g.inferInOneMap(params, x, batch)
	}
	if !ok {
		return nil
	}
	return &speculated{x: x, params: params, types: types}
}

// inferOptimizerOp infers one op of the expansion in types: false when
// its arity is wrong (inferOp relies on the arity checkStructure checks;
// the sequential expansion reports a template op of the wrong arity), it
// reads a name types lacks or its type rule fails.
func inferOptimizerOp(op *Op, types map[string]ops.Type, batch int) bool {
	def, ok := ops.Lookup(op.Type)
	if !ok {
		return false
	}
	if lo, hi := def.NumInputs(); len(op.Inputs) < lo || (hi >= 0 && len(op.Inputs) > hi) || !def.OutputsOK(len(op.Outputs)) {
		return false
	}
	known, err := inferKnownOp(op, types, batch, true)
	return known && err == nil
}

// inferByParam types x's state and ops one parameter at a time, in a
// small map of that parameter's names: the map of every name the
// expansion adds (~400k on a model of 100k ops) made each lookup a cache
// miss. It holds when the ops of each parameter (their Param) come one
// after another, after its state variables, and read only the parameter,
// its gradient, its state and each other's outputs, as every built-in
// optimizer's do; else false, and inferInOneMap answers.
func (g *Graph) inferByParam(x *expansion, batch int) ([]namedType, bool) {
	out := make([]namedType, 0, len(x.vars)+len(x.ops))
	for _, v := range x.vars {
		out = append(out, namedType{v.Name, g.varType(v, batch)})
	}
	local := make(map[string]ops.Type, 16)
	state := out // the state's types, the current parameter's first
	p, grad := "", ""
	for _, op := range x.ops {
		if op.Param != p {
			p, grad = op.Param, GradName(op.Param)
			pv := g.Vars[p]
			if pv == nil {
				return nil, false
			}
			clear(local)
			t := g.varType(pv, batch)
			local[p], local[grad] = t, t
			for len(state) > 0 && x.vars[len(x.vars)-len(state)].Of == p {
				local[state[0].name] = state[0].t
				state = state[1:]
			}
		}
		if !inferOptimizerOp(op, local, batch) {
			return nil, false
		}
		for _, o := range op.Outputs {
			if o != p && o != grad {
				out = append(out, namedType{o, local[o]})
			}
		}
	}
	return out, true
}

// inferInOneMap types x's state and ops in one map of every name, for
// params.
func (g *Graph) inferInOneMap(params []string, x *expansion, batch int) ([]namedType, bool) {
	types := make(map[string]ops.Type, 2*len(params)+len(x.vars)+len(x.ops))
	for _, p := range params {
		t := g.varType(g.Vars[p], batch)
		types[p], types[GradName(p)] = t, t
	}
	for _, v := range x.vars {
		types[v.Name] = g.varType(v, batch)
	}
	for _, op := range x.ops {
		if !inferOptimizerOp(op, types, batch) {
			return nil, false
		}
	}
	for _, p := range params { // known before: Expand does not merge them
		delete(types, p)
		delete(types, GradName(p))
	}
	out := make([]namedType, 0, len(types))
	add := func(n string) {
		if t, ok := types[n]; ok {
			out = append(out, namedType{n, t})
		}
	}
	for _, v := range x.vars {
		add(v.Name)
	}
	for _, op := range x.ops {
		for _, o := range op.Outputs {
			add(o)
		}
	}
	return out, true
}

// fits reports whether s is what the sequential expansion builds after
// autodiff: every parameter has a gradient (a declared variable of that
// name is refused by the structure check either way), dense and of the
// parameter's type, no row gradient appeared, and no state
// variable it declares is declared already. Then its types are those
// inferKnown would give, so Expand merges them without looking.
func (s *speculated) fits(g *Graph, types map[string]ops.Type) bool {
	if s == nil {
		return false
	}
	for _, p := range s.params {
		grad := GradName(p)
		gt, ok := types[grad]
		pt := types[p]
		if !ok || gt.Sparse() || gt.RowSet != "" || gt.DType != pt.DType || !gt.Shape.Equal(pt.Shape) {
			return false
		}
	}
	for _, v := range s.x.vars {
		if _, declared := g.Vars[v.Name]; declared {
			return false // a clash the sequential expansion resolves as it does
		}
	}
	return !hasOpThat(g, ops.RowGrad)
}
