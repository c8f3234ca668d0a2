package program

import (
	"fmt"
	"slices"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/tensor"
)

// A dynamic table's optimizer update, as dsl.LowerDynamic writes it, is
// dyn_gather of the value and of each state, a chain of element-wise ops
// over the step's rows, and one dyn_scatter of the new columns. Run op by
// op, each gather copies the records' columns into a buffer of all the
// step's rows, each element-wise op makes a pass over buffers of that
// size (a few hundred KiB at ~3,000 rows of 16), and the scatter copies
// them back. A training program instead runs the three as one node (a
// dynUpdate): per chunk of the rows, the gathers, the element-wise ops
// at chunk size and the scatter, so a record is fetched once for all its
// columns and the temporaries stay in the L1 cache. Chunks are whole
// rows, streamAlign elements long but for the last, so every element
// takes the path through the vector kernels that one pass over all the
// rows gives it (see streamAlign): the fused update is bitwise the
// unfused one (TestDynUpdateFusedIsBitwiseUnfused).

// dynUpdateElems is about the elements of one chunk temporary (8 KiB).
const dynUpdateElems = 2048

// dynChunkRows is the rows of a fused update's chunk whose widest value
// has width floats a row: a multiple of streamAlign, so that every chunk
// but the last is a multiple of streamAlign elements of any width.
func dynChunkRows(width int) int {
	return max(1, dynUpdateElems/width/streamAlign) * streamAlign
}

// dynPlan is the fused form of one dyn_scatter and the ops it fuses.
type dynPlan struct {
	op      *dsl.Op  // the fused node's: dyn_scatter's, reading the fused ops' outside inputs
	gathers []int    // dyn_gather ops, by graph index
	chain   []int    // the element-wise ops, in topological order
	values  []string // what dyn_scatter writes, column range by column range
	windows []string // the row-sparse inputs from outside (the gradient)
	rowSet  string   // the variable owning the rows every fused value holds
}

// planDynUpdates finds the dyn_scatter ops of a training program that
// can run fused (see dynUpdate), marks the ops each fuses as not run by
// themselves, and returns the plans by the dyn_scatter's graph index.
func planDynUpdates(g *dsl.Graph, keep []bool, types map[string]ops.Type, order []int, opt CompileOptions) map[int]*dynPlan {
	if opt.Targets != nil || opt.KeepTemps {
		return nil
	}
	readers := map[string][]int{}
	for i, op := range g.Ops {
		if keep[i] {
			for _, in := range op.Inputs {
				readers[in] = append(readers[in], i)
			}
		}
	}
	pinned := map[string]bool{}
	for _, a := range g.Assigns {
		pinned[a.Target], pinned[a.Value] = true, true
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
	rank := make([]int, len(g.Ops))
	for r, i := range order {
		rank[i] = r
	}
	var plans map[int]*dynPlan
	for i, op := range g.Ops {
		if !keep[i] || op.Type != "dyn_scatter" {
			continue
		}
		pl := planDynUpdate(g, i, keep, types, readers, pinned)
		if pl == nil {
			continue
		}
		slices.SortFunc(pl.chain, func(a, b int) int { return rank[a] - rank[b] })
		for _, j := range append(slices.Clone(pl.gathers), pl.chain...) {
			keep[j] = false
		}
		if plans == nil {
			plans = map[int]*dynPlan{}
		}
		plans[i] = pl
	}
	return plans
}

// withFused is g with each fused dyn_scatter reading its fused node's
// inputs, for inPlace: an op must not write in place over what the fused
// node reads.
func withFused(g *dsl.Graph, fused map[int]*dynPlan) *dsl.Graph {
	if len(fused) == 0 {
		return g
	}
	w := *g
	w.Ops = slices.Clone(g.Ops)
	for i, pl := range fused {
		w.Ops[i] = pl.op
	}
	return &w
}

// planDynUpdate plans the fusion of dyn_scatter g.Ops[s], or returns nil
// when it cannot run fused: a value it writes comes through an op that is
// not element-wise over the rows, or a value of the chain (a gathered
// column included) is read outside it or kept after the step.
func planDynUpdate(g *dsl.Graph, s int, keep []bool, types map[string]ops.Type, readers map[string][]int, pinned map[string]bool) *dynPlan {
	sc := g.Ops[s]
	v := sc.Attrs.String("var")
	nvals := len(sc.Attrs.Ints("cols"))
	pl := &dynPlan{rowSet: types[sc.Inputs[0]].RowSet, values: slices.Clone(sc.Inputs[:nvals])}
	prod := g.Producers()
	in := map[int]bool{}
	var inputs []string // the fused node's inputs: what the fused ops read from outside
	outside := func(x string) {
		if !slices.Contains(inputs, x) {
			inputs = append(inputs, x)
		}
	}
	var visit func(x string) bool
	visit = func(x string) bool {
		t := types[x]
		if !t.Sparse() {
			outside(x) // a scalar or a row broadcast onto every row
			return true
		}
		if t.RowSet != pl.rowSet || t.DType != tensor.F32 {
			return false
		}
		j, ok := prod[x]
		if ok && in[j] {
			return true
		}
		if !ok || !keep[j] {
			return false
		}
		o := g.Ops[j]
		def, _ := ops.Lookup(o.Type)
		switch {
		case o.Type == "dyn_gather" && o.Attrs.String("var") == v:
			in[j] = true
			pl.gathers = append(pl.gathers, j)
			outside(o.Inputs[0]) // only for its rows: run after them
			return true
		case def != nil && def.ElementWise && !def.Stateful && len(o.Outputs) == 1:
			in[j] = true
			pl.chain = append(pl.chain, j)
			for _, y := range o.Inputs {
				if !visit(y) {
					return false
				}
			}
			return true
		}
		if !slices.Contains(pl.windows, x) {
			pl.windows = append(pl.windows, x) // the gradient: read a chunk at a time
		}
		outside(x)
		return true
	}
	for _, x := range sc.Inputs[:nvals] {
		if !visit(x) {
			return nil
		}
	}
	for _, x := range sc.Inputs[nvals:] { // what sc is ordered after
		if j, ok := prod[x]; !ok || !in[j] {
			outside(x)
		}
	}
	for j := range in {
		for _, y := range g.Ops[j].Outputs {
			if pinned[y] {
				return nil
			}
			for _, r := range readers[y] {
				if r != s && !in[r] {
					return nil
				}
			}
		}
	}
	for j, op := range g.Ops { // every read of the table's columns is fused
		if keep[j] && !in[j] && op.Type == "dyn_gather" && op.Attrs.String("var") == v {
			return nil
		}
	}
	op := *sc
	op.Inputs = inputs
	pl.op = &op
	return pl
}

// dynUpdate is the kernel of a fused dyn_scatter (see planDynUpdates).
type dynUpdate struct {
	name    string
	d       *kernels.Dynamic
	rows    *tensor.RowSet // the step's rows
	chunk   int            // rows per chunk
	crows   *tensor.RowSet // the chunk tensors' rows: 0..m-1
	windows []dynWindow
	gathers []*tensor.Tensor // chunk tensors, by gathered columns
	gcols   []dyntable.Cols
	chain   []kernels.Kernel
	writes  []*tensor.Tensor // chunk tensors, by scattered columns
	wcols   []dyntable.Cols
	slots   []int32
}

// dynWindow is a chunk tensor viewing rows [lo, hi) of a whole one.
type dynWindow struct {
	t, src *tensor.Tensor
}

// buildDynUpdate builds pl's node: its kernels at chunk size, on tensors
// of its own but for the inputs from outside.
func (c *compiler) buildDynUpdate(pl *dynPlan) error {
	g, op := c.p.Graph, pl.op
	v := op.Attrs.String("var")
	d := c.dynamic[v]
	if d == nil || d.Table == nil {
		return dsl.Errorf(op.Pos, "op %s: dynamic table %s has no storage on this node", op.Type, v)
	}
	u := &dynUpdate{name: v, d: d, rows: c.tensorOf(pl.rowSet).Rows}
	widest := 1
	for _, t := range c.types {
		if t.Sparse() && t.RowSet == pl.rowSet {
			widest = max(widest, t.Shape[1:].Numel())
		}
	}
	u.chunk = dynChunkRows(widest)
	u.crows = tensor.NewRowSet(u.chunk)
	u.slots = make([]int32, cap(u.rows.IDs))
	local := map[string]*tensor.Tensor{}
	chunkOf := func(name string) *tensor.Tensor {
		t := tensor.NewSparse(c.types[name].Shape, u.chunk, u.crows)
		local[name] = t
		return t
	}
	for _, x := range pl.windows {
		w := dynWindow{t: tensor.NewSparse(c.types[x].Shape, 0, u.crows), src: c.tensorOf(x)}
		local[x] = w.t
		u.windows = append(u.windows, w)
	}
	for _, j := range pl.gathers {
		o := g.Ops[j]
		u.gathers = append(u.gathers, chunkOf(o.Outputs[0]))
		u.gcols = append(u.gcols, dyntable.Cols{Col: o.Attrs.Int("col"), Width: o.Attrs.Int("width")})
	}
	tensorOf := func(x string) *tensor.Tensor {
		if t, ok := local[x]; ok {
			return t
		}
		return c.tensorOf(x)
	}
	for _, j := range pl.chain {
		o := g.Ops[j]
		args := kernels.Args{Attrs: o.Attrs, Node: c.opt.Node, Dynamic: c.dynamic}
		for _, in := range o.Inputs {
			args.In = append(args.In, tensorOf(in))
		}
		out := chunkOf(o.Outputs[0])
		args.Out = []*tensor.Tensor{out}
		k, err := kernels.Build(o.Type, args)
		if err != nil {
			return dsl.Errorf(o.Pos, "op %s: %v", o.Type, err)
		}
		u.chain = append(u.chain, onRows(k, out))
	}
	for i, col := range op.Attrs.Ints("cols") {
		x := pl.values[i]
		u.writes = append(u.writes, tensorOf(x))
		u.wcols = append(u.wcols, dyntable.Cols{Col: col, Width: c.types[x].Shape[1:].Numel()})
	}
	c.p.nodes = append(c.p.nodes, node{op: op, kernel: u.run})
	return nil
}

// run is the fused update of one step.
func (u *dynUpdate) run(rt kernels.Runtime) error {
	n := len(u.rows.IDs)
	slots := u.d.Slots(u.rows, u.slots)
	t := u.d.Table
	for lo := 0; lo < n; lo += u.chunk {
		hi := min(lo+u.chunk, n)
		u.crows.Identity(hi - lo)
		for _, w := range u.windows {
			rw := w.src.RowWidth()
			w.t.F = w.src.F[lo*rw : hi*rw]
		}
		for i, g := range u.gathers {
			g.Fit()
			u.gcols[i].F = g.F
		}
		if err := t.GatherCols(slots[lo:hi], u.gcols); err != nil {
			return fmt.Errorf("%s: %w", u.name, err)
		}
		for _, k := range u.chain {
			if err := k(rt); err != nil {
				return err
			}
		}
		for i, w := range u.writes {
			u.wcols[i].F = w.F
		}
		if err := t.ScatterCols(slots[lo:hi], u.wcols); err != nil {
			return fmt.Errorf("%s: %w", u.name, err)
		}
	}
	t.Sweep(kernels.SweepPerStep)
	return nil
}
