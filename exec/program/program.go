package program

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/tensor"
)

// Scope holds the tensors of one node: exactly the variables of the
// subgraph placed there. Persistent variables keep their values across
// steps; temporaries are overwritten every step in place.
type Scope map[string]*tensor.Tensor

// CompileOptions selects what a Program computes.
type CompileOptions struct {
	// Batch is the batch size the data variables take.
	Batch int
	// Targets, when set, keeps only the ops needed to compute these
	// variables (e.g. loss and metrics for evaluation) and no assigns. Such
	// a program evaluates or predicts: dropout is the identity in it.
	Targets []string
	// Shared binds variables to existing tensors (e.g. the parameters of a
	// training program reused by an evaluation program). With Targets, a
	// shared variable is an input: the ops producing it are not run.
	Shared Scope
	// Pin keeps these variables' tensors their own: no op writes its
	// output into them in place, so they hold their values after a run
	// (a trainer's received parameters, which evaluation reads).
	Pin []string
	// Workers bounds concurrent compute; 0 means GOMAXPROCS.
	Workers int
	// Sequential runs the ops one after another on the caller's goroutine,
	// blocking ops included. Only for graphs where no blocking op waits on
	// something a later op of the same graph provides (a pserver's block
	// update: accumulate, then the optimizer chain): it saves the hand-offs.
	Sequential bool
	// Node is the node's place in its job, for the kernels that need it
	// (the zero Node: a local run).
	Node kernels.Node
	// KeepTemps gives every temporary its own buffer, so all of them can be
	// inspected after Run (otherwise element-wise ops may work in place).
	KeepTemps bool
	// Tables binds dynamic tables to existing storage (the training
	// program's, read by its evaluation; a saved model's); a table not
	// given gets a new, empty one (dsl.LowerDynamic says how the graph
	// reads them).
	Tables map[string]*dyntable.Table
}

// Program is a graph compiled for one node: every tensor allocated once,
// every kernel built once. Run executes one step without allocating.
type Program struct {
	Graph *dsl.Graph
	Scope Scope
	// Node is the node's place in its job, as compiled.
	Node kernels.Node
	// Tables are the program's dynamic tables by name, and Lowered the
	// tables' layout (nil: the graph has none).
	Tables  map[string]*dyntable.Table
	Lowered []dsl.DynamicTable
	nodes   []node
	roots   []int32
	order   []int32             // the one-goroutine run's order: each wait as late as it can be
	assigns [][2]*tensor.Tensor // target, next value (row-sparse: only its rows)
	sched   *scheduler
	// OnError, when set, is called once as soon as an op fails, before Run
	// waits for the ops still running: the distributed runtime cancels the
	// step's context there, so recvs blocked on other nodes return.
	OnError func(error)
	// Commit, when set, is locked while Run's assigns write the step's
	// values into the persistent variables: a pserver reads a table shard
	// for a pull under it, between two steps' writes.
	Commit sync.Locker
}

type node struct {
	op     *dsl.Op
	kernel kernels.Kernel
	succ   []int32
	npred  int32
	// wait marks the Finish of a split kernel (kernels.Split), whose Start
	// is the node before it and its only predecessor: it runs only when no
	// other ready node is left, so every Start's request is on its way first.
	wait bool
}

// Compile builds a Program for g.
func Compile(g *dsl.Graph, opt CompileOptions) (*Program, error) {
	batch := opt.Batch
	if batch <= 0 {
		batch = max(g.Batch(), 1)
	}
	g, lowered, err := dsl.LowerDynamic(g)
	if err != nil {
		return nil, err
	}
	types, err := g.Infer(batch)
	if err != nil {
		return nil, err
	}
	order, err := g.TopoOrder()
	if err != nil {
		return nil, err
	}
	keep, err := kept(g, opt, types)
	if err != nil {
		return nil, err
	}
	p := &Program{Graph: g, Scope: Scope{}, Node: opt.Node, Lowered: lowered}
	c := &compiler{p: p, opt: opt, types: types, alias: map[string]string{}}
	if c.dynamic, err = p.bindTables(opt); err != nil {
		return nil, err
	}
	fused := planDynUpdates(g, keep, types, order, opt)
	if !opt.KeepTemps {
		c.alias = inPlace(withFused(g, fused), keep, types, opt)
	}
	read := readByKept(g, keep, opt)
	for _, name := range g.Order {
		if opt.Targets == nil || g.Vars[name].Kind.Persistent() && read[name] {
			c.tensorOf(name)
		}
	}
	index := map[int]int32{} // a graph op's (last) node
	for _, i := range order {
		if !keep[i] {
			continue
		}
		build := func() error { return c.build(g.Ops[i], batch) }
		if pl := fused[i]; pl != nil {
			build = func() error { return c.buildDynUpdate(pl) }
		}
		if err := build(); err != nil {
			return nil, err
		}
		index[i] = int32(len(p.nodes) - 1)
	}
	p.link(index)
	p.order = p.waitsLast()
	if opt.Targets == nil {
		for _, a := range g.Assigns {
			p.assigns = append(p.assigns, [2]*tensor.Tensor{c.tensorOf(a.Target), c.tensorOf(a.Value)})
		}
	}
	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	// A blocking op gets a goroutine of its own, so compute always has
	// `workers` left while every blocking op waits. A split op's wait does
	// not need one: it waits on the peers only, and ends without this
	// node's progress.
	blocking := 0
	for i, n := range p.nodes {
		if def, _ := ops.Lookup(n.op.Type); def.Blocking && !n.wait && !p.started(i) {
			blocking++
		}
	}
	if opt.Sequential {
		workers, blocking = 1, 0
	}
	p.sched = newScheduler(p, min(workers+blocking, len(p.nodes)))
	return p, nil
}

// readByKept is the variables the kept ops of an evaluation (Targets)
// read or write, and its shared ones: an evaluation allocates no other
// persistent variable (a table's optimizer state is as large as the
// table, and a prediction never reads it). nil without Targets.
func readByKept(g *dsl.Graph, keep []bool, opt CompileOptions) map[string]bool {
	if opt.Targets == nil {
		return nil
	}
	read := map[string]bool{}
	for name := range opt.Shared {
		read[name] = true
	}
	for i, op := range g.Ops {
		if keep[i] {
			for _, v := range op.Inputs {
				read[v] = true
			}
			for _, v := range op.Outputs {
				read[v] = true
			}
		}
	}
	return read
}

// kept marks the ops a program runs: all of them, or with Targets the
// ops the targets need (a shared variable is an input: what produces it
// does not run).
func kept(g *dsl.Graph, opt CompileOptions, types map[string]ops.Type) ([]bool, error) {
	keep := make([]bool, len(g.Ops))
	if opt.Targets == nil {
		for i := range keep {
			keep[i] = true
		}
		return keep, nil
	}
	prod := g.Producers()
	var mark func(string)
	mark = func(v string) {
		i, ok := prod[v]
		if _, given := opt.Shared[v]; !ok || keep[i] || given {
			return
		}
		keep[i] = true
		for _, in := range g.Ops[i].Inputs {
			mark(in)
		}
	}
	for _, t := range opt.Targets {
		if _, ok := types[t]; !ok {
			return nil, fmt.Errorf("%s: %q is not a variable of the model", g.File, t)
		}
		mark(t)
	}
	return keep, nil
}

// compiler allocates a program's tensors and builds its kernels.
type compiler struct {
	p     *Program
	opt   CompileOptions
	types map[string]ops.Type
	alias map[string]string // an output written in place of its input
	// dynamic: the dynamic tables' kernel state, by name.
	dynamic map[string]*kernels.Dynamic
}

// tensorOf is the tensor of variable name, allocated at its first use: a
// shared one, its alias's, or a new dense or row-sparse one.
func (c *compiler) tensorOf(name string) *tensor.Tensor {
	p := c.p
	if t, ok := p.Scope[name]; ok {
		return t
	}
	if x, ok := c.alias[name]; ok {
		t := c.tensorOf(x)
		if ty := c.types[name]; !ty.Shape.Equal(t.Shape) { // a reshape's view of x's values
			t = &tensor.Tensor{DType: t.DType, Shape: ty.Shape.Clone(), F: t.F, I: t.I, L: t.L}
		}
		p.Scope[name] = t
		return t
	}
	t, ok := c.opt.Shared[name]
	if ty := c.types[name]; !ok && ty.Sparse() {
		rows := tensor.NewRowSet(ty.MaxRows)
		if ty.RowSet != name {
			rows = c.tensorOf(ty.RowSet).Rows
		}
		t = tensor.NewSparse(ty.Shape, ty.MaxRows, rows)
	} else if !ok {
		t = tensor.New(ty.DType, ty.Shape)
	}
	p.Scope[name] = t
	return t
}

// build builds op's kernel for its tensors and appends its node.
func (c *compiler) build(op *dsl.Op, batch int) error {
	args := kernels.Args{Attrs: op.Attrs, Inference: c.opt.Targets != nil, Node: c.opt.Node, Dynamic: c.dynamic}
	for _, in := range op.Inputs {
		args.In = append(args.In, c.tensorOf(in))
	}
	for _, o := range op.Outputs {
		args.Out = append(args.Out, c.tensorOf(o))
	}
	if args.Attrs.Has("shape") {
		args.Attrs = dsl.AttrsAtBatch(args.Attrs, batch)
	}
	def, _ := ops.Lookup(op.Type)
	if split, ok, err := kernels.BuildSplit(op.Type, args); ok {
		if err != nil {
			return dsl.Errorf(op.Pos, "op %s: %v", op.Type, err)
		}
		c.p.nodes = append(c.p.nodes, node{op: op, kernel: split.Start}, node{op: op, kernel: split.Finish, wait: true})
		return nil
	}
	k, err := kernels.Build(op.Type, args)
	if err != nil {
		return dsl.Errorf(op.Pos, "op %s: %v", op.Type, err)
	}
	if def.ElementWise && len(args.Out) == 1 && args.Out[0].Rows != nil {
		k = onRows(k, args.Out[0])
	}
	c.p.nodes = append(c.p.nodes, node{op: op, kernel: k})
	return nil
}

// started reports whether n is the Start of a split kernel (the node
// after it is its wait).
func (p *Program) started(i int) bool { return i+1 < len(p.nodes) && p.nodes[i+1].wait }

// link gives each node its successors and count of predecessors (index:
// a graph op's last node, which a split op's readers follow) and lists the
// nodes that start a step.
func (p *Program) link(index map[int]int32) {
	prod := p.Graph.Producers()
	for i, n := range p.nodes {
		if n.wait { // after its Start only
			p.nodes[i-1].succ = append(p.nodes[i-1].succ, int32(i))
			p.nodes[i].npred++
			continue
		}
		seen := map[int32]bool{}
		for _, in := range n.op.Inputs {
			j, ok := prod[in]
			if !ok {
				continue
			}
			pj, kept := index[j]
			if !kept || seen[pj] { // produced by an op the program does not run: a shared input
				continue
			}
			seen[pj] = true
			p.nodes[pj].succ = append(p.nodes[pj].succ, int32(i))
			p.nodes[i].npred++
		}
	}
	for i, n := range p.nodes {
		if n.npred == 0 {
			p.roots = append(p.roots, int32(i))
		}
	}
}

// waitsLast orders the nodes for a run on one goroutine: the stored
// (topological) order, except that a wait is put off until no other node
// is ready, so every split op's request leaves before the first reply is
// waited for. Without waits it is the stored order: a pserver part's
// blocking ops (serve_rows before accumulate_rows) run as written.
func (p *Program) waitsLast() []int32 {
	n := len(p.nodes)
	order := make([]int32, 0, n)
	pending := make([]int32, n)
	ready := make([]bool, n)
	for i := range p.nodes {
		pending[i] = p.nodes[i].npred
		ready[i] = pending[i] == 0
	}
	for len(order) < n {
		pick, wait := -1, -1 // the first ready node, else the first ready wait
		for i := range n {
			if ready[i] && !p.nodes[i].wait {
				pick = i
				break
			}
			if ready[i] && wait < 0 {
				wait = i
			}
		}
		if pick < 0 {
			pick = wait
		}
		if pick < 0 {
			break // unreachable: the nodes form a DAG
		}
		ready[pick] = false
		order = append(order, int32(pick))
		for _, j := range p.nodes[pick].succ {
			if pending[j]--; pending[j] == 0 {
				ready[j] = true
			}
		}
	}
	return order
}

// inPlace picks outputs that may share their input's buffer: an
// element-wise op (y[i] depends only on inputs at i, so writing y[i] after
// reading x[i] is safe) whose input x is a temporary of the same type read
// by no other op and not needed after the step (not a target, not assigned,
// not shared). Both names then denote one tensor, so an assign that swaps
// buffers keeps them consistent. A pserver's update chain (accumulate,
// scale, sub) then needs one parameter-sized scratch buffer instead of
// three, and a local step touches less memory. A view op (ops.Def.View:
// reshape, reshape_like) of such an x, dense, of as many elements, is a view of it: its tensor
// has the new shape and x's buffer (tensorOf), so its copy is skipped
// (serving the CTR example, its 166 KB of embedding rows a request).
func inPlace(g *dsl.Graph, keep []bool, types map[string]ops.Type, opt CompileOptions) map[string]string {
	readers := map[string]int{}
	for i, op := range g.Ops {
		if keep[i] {
			for _, in := range op.Inputs {
				readers[in]++
			}
		}
	}
	pinned := map[string]bool{}
	for _, a := range g.Assigns {
		pinned[a.Target], pinned[a.Value] = true, true
	}
	for _, t := range opt.Targets {
		pinned[t] = true
	}
	for _, t := range opt.Pin {
		pinned[t] = true
	}
	if g.Train != nil {
		pinned[g.Train.Loss] = true
		for _, m := range g.Train.Metrics {
			pinned[m] = true
		}
	}
	prod := g.Producers()
	alias := map[string]string{}
	taken := map[string]bool{}
	for i, op := range g.Ops {
		def, _ := ops.Lookup(op.Type)
		// a view op's output (a reshape's) is a view of its input's values
		// (tensorOf), which its kernel's copy then leaves as they are
		view := def.View
		if !keep[i] || !def.ElementWise && !view || len(op.Outputs) != 1 {
			continue
		}
		y := op.Outputs[0]
		if pinned[y] || g.Vars[y] != nil {
			continue
		}
		inputs := op.Inputs
		if view {
			inputs = inputs[:1]
		}
		for _, x := range inputs {
			_, fromOp := prod[x]
			_, shared := opt.Shared[x]
			tx, ty := types[x], types[y]
			fits := tx.Same(ty)
			if view {
				fits = tx.DType == ty.DType && !tx.Sparse() && !ty.Sparse() && tx.Shape.Numel() == ty.Shape.Numel()
			}
			if fromOp && !shared && !pinned[x] && !taken[x] && g.Vars[x] == nil && readers[x] == 1 && fits {
				alias[y], taken[x] = x, true
				break
			}
		}
	}
	return alias
}

// Run executes one step: every op once, in dependency order, independent
// ops concurrently; then the assigns move next-step values into the
// persistent variables (by swapping buffers, not copying).
func (p *Program) Run(rt kernels.Runtime) error {
	if err := p.sched.run(rt); err != nil {
		return err
	}
	if p.Commit != nil {
		p.Commit.Lock()
		defer p.Commit.Unlock()
	}
	for _, a := range p.assigns {
		if a[1].Rows != nil {
			kernels.ScatterRows(a[0], a[1])
		} else {
			tensor.SwapData(a[0], a[1])
		}
	}
	return nil
}

// onRows runs an element-wise kernel on the values of a row-sparse output:
// its buffer is sized to the step's rows first, so the kernel's loops (over
// the slices' lengths) cover exactly the rows the step holds.
func onRows(k kernels.Kernel, out *tensor.Tensor) kernels.Kernel {
	return func(rt kernels.Runtime) error {
		out.Fit()
		return k(rt)
	}
}

// Close stops the program's worker goroutines.
func (p *Program) Close() { p.sched.close() }

// scheduler runs a step's ops on a fixed set of goroutines: the caller plus
// workers-1 helpers, which wait on a condition variable between steps. An
// op whose predecessors are done becomes ready; the goroutine that made it
// ready runs it next unless idle helpers can take surplus ready ops, so a
// chain of dependent ops runs on one goroutine without hand-offs. A ready
// wait (the Finish of a split kernel) is taken only by a goroutine that
// finds no other ready node, oldest first: every Start's request leaves
// before a goroutine blocks on a reply.
type scheduler struct {
	p       *Program
	mu      sync.Mutex
	cond    *sync.Cond
	pending []int32
	ready   []int32
	waits   []int32 // ready waits; waits[head:] not yet taken
	head    int
	left    int // ops not yet finished this step
	running int // ops being run
	idle    int
	gen     uint64
	err     error
	rt      kernels.Runtime
	closed  bool
	wg      sync.WaitGroup
	helpers int
}

func newScheduler(p *Program, workers int) *scheduler {
	s := &scheduler{p: p, pending: make([]int32, len(p.nodes)), ready: make([]int32, 0, len(p.nodes)),
		waits: make([]int32, 0, len(p.nodes))}
	s.cond = sync.NewCond(&s.mu)
	if workers > 1 {
		s.helpers = workers - 1
		for i := 0; i < s.helpers; i++ {
			s.wg.Add(1)
			go s.helper()
		}
	}
	return s
}

func (s *scheduler) run(rt kernels.Runtime) error {
	if s.helpers == 0 {
		return s.runSequential(rt)
	}
	s.mu.Lock()
	for i := range s.p.nodes {
		s.pending[i] = s.p.nodes[i].npred
	}
	s.ready = append(s.ready[:0], s.p.roots...)
	s.waits, s.head = s.waits[:0], 0
	s.left = len(s.p.nodes)
	s.err = nil
	s.rt = rt
	s.gen++
	s.cond.Broadcast()
	s.work()
	for s.running > 0 {
		s.cond.Wait()
	}
	err := s.err
	s.mu.Unlock()
	return err
}

// runSequential is the one-goroutine path: ops in dependency order.
func (s *scheduler) runSequential(rt kernels.Runtime) error {
	for _, i := range s.p.order {
		n := &s.p.nodes[i]
		if err := n.kernel(rt); err != nil {
			if s.p.OnError != nil {
				s.p.OnError(err)
			}
			return opError(n.op, err)
		}
	}
	return nil
}

// opError names the op that failed; a cancelled step is reported as such,
// not as a failure of whichever op was waiting.
func opError(op *dsl.Op, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("op %s (%v -> %v) at %s: %w", op.Type, op.Inputs, op.Outputs, op.Pos, err)
}

// work runs ready ops until the step is finished or failed. Called with mu held.
func (s *scheduler) work() {
	for {
		for len(s.ready) == 0 && s.head == len(s.waits) && s.left > 0 && s.err == nil {
			s.idle++
			s.cond.Wait()
			s.idle--
		}
		if s.left == 0 || s.err != nil {
			return
		}
		var i int32
		if k := len(s.ready); k > 0 {
			i, s.ready = s.ready[k-1], s.ready[:k-1]
		} else {
			i = s.waits[s.head]
			s.head++
		}
		s.running++
		rt := s.rt
		s.mu.Unlock()
		n := &s.p.nodes[i]
		err := n.kernel(rt)
		s.mu.Lock()
		s.running--
		if err != nil {
			if s.err == nil {
				s.err = opError(n.op, err)
				if s.p.OnError != nil {
					s.p.OnError(err)
				}
			}
			s.cond.Broadcast()
			return
		}
		s.left--
		for _, j := range n.succ {
			if s.pending[j]--; s.pending[j] == 0 {
				if s.p.nodes[j].wait {
					s.waits = append(s.waits, j)
				} else {
					s.ready = append(s.ready, j)
				}
			}
		}
		if s.left == 0 {
			s.cond.Broadcast()
			return
		}
		if len(s.ready)+len(s.waits)-s.head > 1 && s.idle > 0 {
			s.cond.Signal()
		}
	}
}

func (s *scheduler) helper() {
	defer s.wg.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	// Generation 0 is before the first step: a helper that starts after
	// the first run began still joins it. (Reading s.gen here would skip
	// that step, leaving it to the caller alone, which deadlocks when a
	// blocking op waits on a later op of the same step: a trainer's recv
	// of the pservers' partial norms waits on its own gradient sends.)
	var seen uint64
	for {
		for s.gen == seen && !s.closed {
			s.cond.Wait()
		}
		if s.closed {
			return
		}
		seen = s.gen
		s.work()
		if s.running == 0 {
			s.cond.Broadcast()
		}
	}
}

func (s *scheduler) close() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	s.wg.Wait()
}

// Batch is the batch size the program was compiled at (0: it reads no data).
func (p *Program) Batch() int {
	if p.Graph.Data != nil {
		for _, c := range p.Graph.Data.Columns() {
			if t := p.Scope[c.Name]; t != nil && len(t.Shape) > 0 {
				return t.Shape[0]
			}
		}
	}
	return 0
}

// PersistentOf returns the persistent variables of a program's scope.
func PersistentOf(p *Program) Scope {
	s := Scope{}
	for _, name := range p.Graph.Order {
		if v := p.Graph.Vars[name]; v.Kind.Persistent() {
			if t, ok := p.Scope[name]; ok {
				s[name] = t
			}
		}
	}
	return s
}
