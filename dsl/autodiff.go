package dsl

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/internal/slab"
)

// gradBuilder appends backward ops to the graph, inferring each one's type
// as it is emitted so later gradient rules can ask for shapes.
type gradBuilder struct {
	g     *Graph
	types map[string]ops.Type
	batch int
	n     int
	pos   Pos
	err   error
	// renameFresh renames only Emit's temporaries, bw.<type>.<n>:
	// emitted[n] is the op producing the n-th until it is renamed, and
	// readN[n] says whether some op reads it, so it needs no scan of the
	// whole graph nor a lookup in a map of every name. read holds the
	// other bw.* names ops read (a model may name its values so too).
	read    map[string]bool
	emitted []*Op
	readN   []bool
	ops     slab.Slab[Op] // the ops it emits, and their outputs
	outs    slab.Slab[string]
}

// bwPrefix starts the names of backward temporaries (Emit's).
const bwPrefix = "bw."

func (b *gradBuilder) Emit(typ string, inputs []string, attrs ops.Attrs) string {
	b.n++
	out := bwPrefix + typ + "." + strconv.Itoa(b.n)
	b.emit(typ, inputs, attrs, out, b.n)
	return out
}

func (b *gradBuilder) emitNamed(typ string, inputs []string, attrs ops.Attrs, out string) {
	b.emit(typ, inputs, attrs, out, 0)
}

// emit appends the op computing out, Emit's n-th temporary when n > 0.
func (b *gradBuilder) emit(typ string, inputs []string, attrs ops.Attrs, out string, n int) {
	if _, ok := ops.Lookup(typ); !ok {
		panic("autodiff: gradient rule emits unknown op " + typ)
	}
	outs := b.outs.Take(1)
	outs[0] = out
	op := newOpIn(b.ops.One(), typ, inputs, outs, attrs, Backward, b.pos)
	b.g.Ops = append(b.g.Ops, op)
	for _, in := range inputs {
		if strings.HasPrefix(in, bwPrefix) {
			if k, own := b.own(in); own {
				b.readN[k] = true
			} else {
				b.read[in] = true
			}
		}
	}
	if n > 0 {
		for len(b.emitted) <= n {
			b.emitted, b.readN = append(b.emitted, nil), append(b.readN, false)
		}
		b.emitted[n] = op
	}
	if err := inferOp(op, b.types, b.batch); err != nil && b.err == nil {
		b.err = err
	}
}

func (b *gradBuilder) Type(name string) ops.Type { return b.types[name] }

// Differentiate appends the backward pass of train.loss to the graph. The
// gradient of x is named x@GRAD; contributions from several consumers are
// summed.
func (g *Graph) Differentiate() error {
	if g.Train == nil || g.Train.Loss == "" {
		return nil
	}
	types, order, err := g.infer(g.Batch(), 0)
	if err != nil {
		return err
	}
	return g.differentiate(types, order)
}

// differentiate is Differentiate given the forward graph's types at the
// training batch, which it extends with the backward ops', and its ops'
// dependency order.
func (g *Graph) differentiate(types map[string]ops.Type, order []int) error {
	t := g.Train
	forward := append([]*Op{}, g.Ops...)

	// Which variables lie on a path from a parameter to the loss?
	fromParam := make(map[string]bool, len(g.Ops))
	params := g.Params() // autodiff adds ops, never variables
	for _, p := range params {
		fromParam[p] = true
	}
	for _, i := range order {
		op := forward[i]
		def, _ := ops.Lookup(op.Type)
		if def.Grad == nil {
			continue
		}
		for _, in := range op.Inputs {
			if fromParam[in] {
				for _, o := range op.Outputs {
					fromParam[o] = true
				}
				break
			}
		}
	}
	if !fromParam[t.Loss] {
		return Errorf(t.Pos, "train.loss %q does not depend on any parameter: nothing to train", t.Loss)
	}

	b := &gradBuilder{g: g, types: types, batch: g.Batch(), pos: Pos{File: g.File}, read: map[string]bool{},
		emitted: make([]*Op, 1, 1+3*len(g.Ops)), readN: make([]bool, 1, 1+3*len(g.Ops))}
	for _, op := range g.Ops {
		for _, in := range op.Inputs {
			if strings.HasPrefix(in, bwPrefix) {
				b.read[in] = true
			}
		}
	}
	contrib := make(map[string][]string, len(g.Ops))
	b.pos = t.Pos
	b.emitNamed("fill", nil, ops.Attrs{"value": 1.0, "shape": []int{}}, GradName(t.Loss))
	contrib[t.Loss] = []string{GradName(t.Loss)}

	for k := len(order) - 1; k >= 0; k-- {
		op := forward[order[k]]
		def, _ := ops.Lookup(op.Type)
		if def.Grad == nil {
			continue
		}
		ga := ops.GradArgs{Inputs: op.Inputs, Outputs: op.Outputs, Attrs: op.Attrs,
			OutGrads: make([]string, len(op.Outputs)), Need: make([]bool, len(op.Inputs))}
		any := false
		for i, o := range op.Outputs {
			if len(contrib[o]) > 0 {
				ga.OutGrads[i] = b.finish(o, contrib[o])
				any = true
			}
		}
		need := false
		for i, in := range op.Inputs {
			ga.Need[i] = fromParam[in]
			need = need || ga.Need[i]
		}
		if !any || !need {
			continue
		}
		if len(op.Outputs) > 1 {
			for i := range ga.OutGrads {
				// A state's next value (batch_norm's running statistics)
				// carries no gradient: its rule reads none.
				if ga.OutGrads[i] == "" && !def.UpdateOutput(i) {
					ga.OutGrads[i] = b.Emit("fill", nil, ops.Attrs{"value": 0.0, "shape": []int(types[op.Outputs[i]].Shape)})
				}
			}
		}
		b.pos = op.Pos
		grads := def.Grad(b, ga)
		for i, gname := range grads {
			if gname != "" && ga.Need[i] {
				contrib[op.Inputs[i]] = append(contrib[op.Inputs[i]], gname)
			}
		}
		if b.err != nil {
			return fmt.Errorf("autodiff of op %s at %s: %w", op.Type, op.Pos, b.err)
		}
	}
	for _, p := range params {
		if len(contrib[p]) == 0 {
			continue
		}
		b.pos = g.Vars[p].Pos
		final := b.finish(p, contrib[p])
		if final != GradName(p) {
			b.emitNamed("identity", []string{final}, nil, GradName(p))
		}
	}
	return b.err
}

// finish sums the gradient contributions of x into one variable, named
// x@GRAD where that is possible without renaming a shared variable.
func (b *gradBuilder) finish(x string, parts []string) string {
	want := GradName(x)
	if len(parts) == 1 {
		p := parts[0]
		if p == want {
			return p
		}
		if strings.HasPrefix(p, bwPrefix) && b.renameFresh(p, want) {
			return want
		}
		return p
	}
	acc := parts[0]
	for i, p := range parts[1:] {
		out := fmt.Sprintf("%s.sum%d", want, i)
		if i == len(parts)-2 {
			out = want
		}
		ta, tp := b.types[acc], b.types[p]
		switch {
		case ta.Sparse() && tp.Sparse() && ta.RowSet != tp.RowSet:
			// row gradients from two lookups: the union of their rows
			b.emitNamed("sparse_add", []string{acc, p}, nil, out)
			acc = out
			continue
		case ta.Sparse() && !tp.Sparse():
			acc = b.Emit("to_dense", []string{acc}, nil)
		case tp.Sparse() && !ta.Sparse():
			p = b.Emit("to_dense", []string{p}, nil)
		}
		b.emitNamed("add", []string{acc, p}, nil, out)
		acc = out
	}
	return acc
}

// own reports whether name is Emit's n-th temporary, not yet renamed.
func (b *gradBuilder) own(name string) (n int, ok bool) {
	dot := strings.LastIndexByte(name, '.')
	n, err := strconv.Atoi(name[dot+1:])
	if err != nil || n <= 0 || n >= len(b.emitted) || b.emitted[n] == nil || b.emitted[n].Outputs[0] != name {
		return 0, false
	}
	return n, true
}

// renameFresh renames a temporary of Emit's that no op reads yet (never
// a name of the model's, nor a gradient's name built from one: a value
// the model names bw.* has a gradient bw.*@GRAD that other gradients may
// already hold).
func (b *gradBuilder) renameFresh(from, to string) bool {
	n, own := b.own(from)
	if !own || b.readN[n] || b.read[from] {
		return false
	}
	if _, taken := b.types[to]; taken {
		return false
	}
	b.emitted[n].Outputs[0] = to
	b.emitted[n] = nil
	b.types[to] = b.types[from]
	delete(b.types, from)
	return true
}

// ExpandOptimizer instantiates the optimizer template once per parameter
// that has a gradient: state variables beside the parameter, the update ops
// (section optimize, marked with the parameter) and the assigns.
func (g *Graph) ExpandOptimizer() error {
	if !g.HasOptimizer() {
		return nil
	}
	prod := g.Producers()
	sparse, err := g.rowGradients(prod)
	if err != nil {
		return err
	}
	var params []string // those with a gradient
	for _, p := range g.Params() {
		if _, ok := prod[GradName(p)]; ok {
			params = append(params, p)
		}
	}
	x, err := g.optimizerOps(params, sparse)
	x.apply(g)
	return err
}

// expansion is what the optimizer expansion adds to a graph, in order.
type expansion struct {
	ops     []*Op
	vars    []*Var
	assigns []Assign
	params  int // how many parameters it expands: room for their assigns
	// what the template's ops and state are built in
	opSlab   slab.Slab[Op]
	varSlab  slab.Slab[Var]
	initSlab slab.Slab[Init]
	names    slab.Slab[string]
}

func (x *expansion) apply(g *Graph) {
	g.Ops = append(g.Ops, x.ops...)
	for _, v := range x.vars {
		g.AddVar(v)
	}
	g.Assigns = append(g.Assigns, x.assigns...)
}

// optimizerOps builds the optimizer's ops, state and assigns for params
// (each has a gradient; sparse marks row gradients) without changing g,
// whose variables it only reads: Expand runs it while autodiff appends
// the backward pass (speculateOptimizer). Each parameter gets its own
// optimizer (params.P.optimizer) or train.optimizer.
func (g *Graph) optimizerOps(params []string, sparse map[string]bool) (*expansion, error) {
	x := &expansion{}
	var errs ErrorList
	clipped, err := g.clipGradients(params, sparse, x)
	if err != nil {
		return x, err
	}
	byOpt := map[*Optimizer]*templateExpansion{}
	// One map of bindings and one of assign targets serve every parameter
	// in turn (an expansion keeps neither): 66k parameters made 132k maps.
	bind, target := map[string]string{}, map[string]string{}
	x.params = len(params)
	for _, p := range params {
		o := g.OptimizerOf(p)
		if o == nil {
			errs = append(errs, Errorf(g.Vars[p].Pos, "parameter %s has a gradient but no optimizer: give it one (params.%s.optimizer: {type: sgd, lr: 0.1}) or set train.optimizer, the optimizer of every parameter without its own", p, p))
			continue
		}
		te := byOpt[o]
		if te == nil {
			te = newTemplateExpansion(o, &errs)
			byOpt[o] = te
		}
		clear(bind)
		clear(target)
		bind["$grad"] = GradName(p)
		if c, ok := clipped[p]; ok {
			bind["$grad"] = c
		}
		if err := te.expand(g, x, p, sparse[p], bind, target); err != nil {
			return x, err
		}
	}
	if own := g.ParamOptimizers(); len(own) > 0 {
		has := make(map[string]bool, len(params))
		for _, p := range params {
			has[p] = true
		}
		for _, p := range own {
			if !has[p] {
				errs = append(errs, Errorf(g.Vars[p].Optimizer.Pos, "parameter %s has an optimizer of its own but no gradient: it does not reach train.loss through differentiable ops, so nothing would update it; remove its optimizer or use it in the loss", p))
			}
		}
	}
	return x, errs.Err()
}

// templateExpansion instantiates one optimizer's template for each of its
// parameters. Template errors are reported for its first parameter only,
// and an update op's attributes, which depend on the optimizer's
// hyper-parameters alone, are decoded once and shared by every parameter
// (no op's attributes change after it is built).
type templateExpansion struct {
	o     *Optimizer
	errs  *ErrorList
	dense TemplateUpdate // the template's Update and Assign
	seen  [2]bool        // the dense and the sparse form were expanded once (their errors reported)
	attrs [2][]ops.Attrs
	inits []*Init // the state's initializers, with the hyper-parameters
}

func newTemplateExpansion(o *Optimizer, errs *ErrorList) *templateExpansion {
	te := &templateExpansion{o: o, errs: errs, dense: TemplateUpdate{Update: o.Tmpl.Update, Assign: o.Tmpl.Assign, Pos: o.Tmpl.Pos}}
	d := &decoder{}
	for _, st := range o.Tmpl.State {
		in := st.Init
		if st.initNode != nil {
			d.file = st.Pos.File
			in = d.initWith(st.initNode, "optimizer.state."+st.Name+".init", o.Hyper)
		}
		te.inits = append(te.inits, in)
	}
	*errs = append(*errs, d.errs...)
	return te
}

// expand adds parameter p's update to x: sparse when p's gradient is a
// row gradient; bind holds $grad, target is empty (both are filled for p).
func (te *templateExpansion) expand(g *Graph, x *expansion, p string, sparse bool, bind, target map[string]string) error {
	fi, form := 0, &te.dense
	if sparse && te.o.Tmpl.Sparse != nil {
		fi, form = 1, te.o.Tmpl.Sparse
	}
	if te.attrs[fi] == nil {
		te.attrs[fi] = make([]ops.Attrs, len(form.Update))
	}
	pe := &paramExpansion{te: te, g: g, x: x, p: p, pv: g.Vars[p], bind: bind, target: target, first: !te.seen[fi]}
	if x.assigns == nil {
		x.assigns = make([]Assign, 0, x.params*len(form.Assign))
	}
	pe.state(sparse)
	if err := pe.prelude(); err != nil {
		return err
	}
	pe.update(form, te.attrs[fi])
	for _, a := range form.Assign {
		to, ok := pe.target[a.Target]
		if !ok {
			to = pe.local(a.Target, a.Pos)
		}
		x.assigns = append(x.assigns, Assign{Target: to, Value: pe.local(a.Value, a.Pos), Pos: a.Pos})
	}
	*te.errs = append(*te.errs, pe.errs...)
	te.seen[fi] = true
	return nil
}

// paramExpansion is one parameter's instance of an optimizer template.
type paramExpansion struct {
	te   *templateExpansion
	g    *Graph
	x    *expansion
	p    string
	pv   *Var
	bind map[string]string // template names: what the update ops read and write
	// target binds assign targets: the variables themselves. For a row
	// gradient the update ops read the touched rows instead (gathered
	// from the parameter and each state of its shape or one value per
	// row), and the assigns write back just those rows.
	target map[string]string
	lr     string // the scheduled rate's variable ("": none)
	first  bool   // the template's first parameter: its errors are reported
	errs   ErrorList
}

func (pe *paramExpansion) mark(op *Op) *Op {
	op.Param, op.Place = pe.p, pe.pv.Place
	return op
}

// state declares the parameter's optimizer state and binds the template's
// names; a sparse update reads the touched rows, gathered first.
func (pe *paramExpansion) state(sparse bool) {
	o, p, pv := pe.te.o, pe.p, pe.pv
	pe.bind["$param"] = p
	pe.target["$param"] = p
	var gather [][2]string
	if sparse {
		pe.bind["$param"] = p + "@param.rows"
		gather = append(gather, [2]string{p, pe.bind["$param"]})
	}
	for i, st := range o.Tmpl.State {
		name := p + "@" + st.Name
		pe.bind["$"+st.Name], pe.target["$"+st.Name] = name, name
		shape := st.stateShape(pv.Shape)
		if sparse && (shape.Equal(pv.Shape) || st.PerRow && len(shape) > 0) {
			pe.bind["$"+st.Name] = name + ".rows"
			gather = append(gather, [2]string{name, pe.bind["$"+st.Name]})
		}
		init := pe.x.initSlab.One()
		*init = Init{Type: "zeros", Pos: st.Pos}
		if pe.te.inits[i] != nil {
			*init = *pe.te.inits[i]
		}
		v := pe.x.varSlab.One()
		*v = Var{Name: name, Kind: KindState, DType: pv.DType, Shape: shape, Init: init, Place: pv.Place, Of: p, Pos: st.Pos}
		pe.x.vars = append(pe.x.vars, v)
	}
	for _, gr := range gather {
		pe.x.ops = append(pe.x.ops, &Op{Type: "gather_rows", Inputs: []string{gr[0], GradName(p)}, Outputs: []string{gr[1]},
			Attrs: ops.Attrs{}, Section: Optimize, Param: p, Place: pv.Place, Pos: o.Pos})
	}
}

// prelude adds what precedes the template's update: the step counter,
// the scheduled learning rate and torch's coupled weight decay.
func (pe *paramExpansion) prelude() error {
	o, p, x := pe.te.o, pe.p, pe.x
	if o.Tmpl.usesStep() || o.Schedule != nil {
		pe.bind["$step"] = p + "@$step"
		x.ops = append(x.ops, pe.mark(NewOp("step", nil, []string{pe.bind["$step"]}, nil, Optimize, o.Pos)))
	}
	if o.Schedule != nil {
		pe.lr = p + "@$lr"
		steps := 0
		if pe.g.Train != nil {
			steps = pe.g.Train.Steps
		}
		list, err := scheduleOps(o.Schedule, o.Hyper["lr"], steps, p, pe.bind["$step"], pe.lr, pe.mark)
		if err != nil {
			return err
		}
		x.ops = append(x.ops, list...)
	}
	if wd := o.Hyper["weight_decay"]; wd != 0 && !o.Tmpl.readsHyper("weight_decay") {
		// torch's coupled weight decay: g = g + weight_decay * p
		term, decayed := p+"@$weight_decay.term", p+"@$grad.decayed"
		x.ops = append(x.ops,
			pe.mark(NewOp("scale", []string{pe.bind["$param"]}, []string{term}, ops.Attrs{"factor": wd}, Optimize, o.Pos)),
			pe.mark(NewOp("add", []string{pe.bind["$grad"], term}, []string{decayed}, nil, Optimize, o.Pos)))
		pe.bind["$grad"] = decayed
	}
	return nil
}

// local is a template name's variable: a bound placeholder, or the
// parameter's own temporary (an unknown $name is an error).
func (pe *paramExpansion) local(n string, pos Pos) string {
	if v, ok := pe.bind[n]; ok {
		return v
	}
	if strings.HasPrefix(n, "$") {
		if pe.first {
			placeholders := make([]string, 0, len(pe.bind)+1)
			if _, ok := pe.bind["$step"]; !ok {
				placeholders = append(placeholders, "$step")
			}
			for k := range pe.bind {
				placeholders = append(placeholders, k)
			}
			sort.Strings(placeholders)
			pe.errs = append(pe.errs, Errorf(pos, "optimizer refers to %s, which is not $param, $grad, $step or a state variable%s; known here: %s", n, suggest(n, placeholders), strings.Join(placeholders, ", ")))
		}
		return n
	}
	return pe.p + "@" + n
}

// update adds the template's update ops; an op that scales by the
// learning rate alone reads the scheduled rate instead. tmplAttrs holds
// the ops' decoded attributes, shared by every parameter.
func (pe *paramExpansion) update(form *TemplateUpdate, tmplAttrs []ops.Attrs) {
	o := pe.te.o
	var d decoder
	scaled := false
	for ti, top := range form.Update {
		def, _ := ops.Lookup(top.Type)
		op := pe.x.opSlab.One()
		*op = Op{Type: top.Type, Section: Optimize, Param: pe.p, Place: pe.pv.Place, Pos: top.Pos}
		if len(top.Inputs) > 0 {
			op.Inputs = pe.x.names.Take(len(top.Inputs) + 1)[:0] // one more for a scheduled rate
		}
		for _, in := range top.Inputs {
			op.Inputs = append(op.Inputs, pe.local(in, top.Pos))
		}
		if len(top.Outputs) > 0 {
			op.Outputs = pe.x.names.Take(len(top.Outputs))[:0]
		}
		for _, out := range top.Outputs {
			op.Outputs = append(op.Outputs, pe.local(out, top.Pos))
		}
		if kind := lrFactor(top); pe.lr != "" && kind != "" {
			// the scheduled rate: a multiplication (or division) by this step's lr
			op.Type, op.Inputs, op.Attrs = kind, append(op.Inputs, pe.lr), ops.Attrs{}
			scaled = true
			pe.x.ops = append(pe.x.ops, op)
			continue
		}
		if pe.lr != "" && pe.first {
			pe.lrAttrErrors(top)
		}
		if tmplAttrs[ti] == nil { // the same for every parameter: decoded once, shared as split's copies share them
			d.file = top.Pos.File
			tmplAttrs[ti] = d.attrs(top.rawAt, top.raw, def.Attrs, "op "+top.Type, o.Hyper)
		}
		op.Attrs = tmplAttrs[ti]
		pe.x.ops = append(pe.x.ops, op)
	}
	if pe.first {
		pe.errs = append(pe.errs, d.errs...)
		if pe.lr != "" && !scaled {
			pe.errs = append(pe.errs, Errorf(o.Schedule.Pos, "lr: {schedule: ...} needs an update op that scales by the learning rate alone ({type: scale, attrs: {factor: $lr}}, or factor: 1 / $lr); this optimizer has none"))
		}
	}
}

// lrAttrErrors reports, in file order, the attributes of a template op
// that read the learning rate, which a schedule makes a value of the step.
func (pe *paramExpansion) lrAttrErrors(top *Op) {
	keys := sortedKeys(top.raw)
	sort.SliceStable(keys, func(i, j int) bool {
		a, b := top.raw[keys[i]], top.raw[keys[j]]
		return a.Line < b.Line || a.Line == b.Line && a.Column < b.Column
	})
	for _, key := range keys {
		v := top.raw[key]
		if refersTo(v.Value, "lr") {
			pe.errs = append(pe.errs, Errorf(Pos{File: top.Pos.File, Line: v.Line, Col: v.Column}, "lr: {schedule: ...} makes the learning rate a value of the step, which attribute %s = %q cannot read; scale by $lr or 1 / $lr alone (attrs: {factor: $lr}) or write the schedule in the update with $step", key, v.Value))
		}
	}
}

// rowGradients reports which parameters have a row-sparse gradient (a
// table read only through lookup_table or embedding_bag). Shapes are
// inferred only when the graph has a row gradient at all.
func (g *Graph) rowGradients(prod map[string]int) (map[string]bool, error) {
	if !hasOpThat(g, ops.RowGrad) {
		return nil, nil
	}
	types, err := g.Infer(g.Batch())
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, p := range g.Params() {
		out[p] = types[GradName(p)].Sparse()
	}
	return out, nil
}

// Expanded reports whether the graph already holds backward or optimizer ops.
func (g *Graph) Expanded() bool {
	for _, op := range g.Ops {
		if op.Section != Forward {
			return true
		}
	}
	return false
}
