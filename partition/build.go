package partition

import (
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/internal/slab"
)

// build fills the plan. The trainer's subgraph is built beside the
// pservers' subgraphs and the plan's description: each only reads the
// groups and blocks and writes its own graphs, and on a model of many
// thousand layers the two halves take about as long (docs/split.md,
// Cost). The clip-norm exchange joins both sides and describe lists its
// transfers, so with clip.norm they follow.
func (s *splitter) build() *Plan {
	p, blocks := s.newPlan()
	tables := s.bundled()
	late := s.clipNorm > 0 || tables != nil // the description follows what joins both sides
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.buildPServers(p, blocks)
		if !late {
			s.describe(p, blocks)
		}
	}()
	s.buildTrainer(p.Trainer)
	if tables != nil {
		tables = s.bundleTrainer(p.Trainer, tables)
	}
	<-done
	if tables != nil {
		for _, ps := range p.PServers {
			bundlePServer(ps, tables)
		}
	}
	if s.clipNorm > 0 {
		s.buildClipNorm(p, blocks)
	}
	if late {
		s.describe(p, blocks)
	}
	return p
}

// newPlan returns the plan's empty subgraphs and the blocks on pservers
// in name order.
func (s *splitter) newPlan() (*Plan, []*block) {
	g, opt := s.g, s.opt
	p := &Plan{Trainer: &dsl.Graph{Name: g.Name, File: "trainer.yaml", Data: g.Data}}
	p.Trainer.Train = &dsl.Train{Loss: g.Train.Loss, Metrics: g.Train.Metrics, Batch: g.Train.Batch, Steps: g.Train.Steps, Epochs: g.Train.Epochs, EvalEvery: g.Train.EvalEvery, Pos: g.Train.Pos}
	for i := range opt.PServers {
		p.PServers = append(p.PServers, &dsl.Graph{Name: g.Name, File: PServerFile(i), Vars: map[string]*dsl.Var{},
			Train: &dsl.Train{Batch: g.Train.Batch, Steps: g.Train.Steps, Epochs: g.Train.Epochs, Pos: g.Train.Pos}})
	}
	s.nodes = make([]string, opt.PServers)
	for i := range s.nodes {
		s.nodes[i] = pserverNode(i)
	}
	s.count = opt.Trainers
	if opt.Mode == Async {
		s.count = 1
	}
	var blocks []*block
	for _, gr := range s.byName {
		for _, b := range gr.blocks {
			b.grad = dsl.GradName(b.name)
			if b.pserver >= 0 {
				blocks = append(blocks, b)
			}
		}
	}
	if !slices.IsSortedFunc(blocks, func(a, b *block) int { return cmpStrict(a.name, b.name) }) {
		sort.Slice(blocks, func(i, j int) bool { return blocks[i].name < blocks[j].name })
	}
	return p, blocks
}

// cmpStrict is strings.Compare with equal strings out of order, so that
// slices.IsSortedFunc(x, cmpStrict) holds only for strictly increasing x:
// sort.Slice would leave such a slice as it is.
func cmpStrict(a, b string) int {
	if a < b {
		return -1
	}
	return 1
}

// buildTrainer fills the trainer's subgraph.
func (s *splitter) buildTrainer(t *dsl.Graph) {
	trainerOps, extra := s.trainerVars(t)
	// Trainer ops in a canonical order, with recvs before the first reader
	// of a parameter and sends right after its gradient is computed.
	t.Ops = make([]*dsl.Op, 0, len(trainerOps)+extra)
	nin := 0
	for _, op := range trainerOps {
		nin += len(op.Inputs)
	}
	b := &trainerBuild{s: s, t: t, names: slab.Sized[string](nin), received: make(map[string]bool, len(s.names))}
	// A sharded table's rows are fetched once, by the ids of all its
	// lookups, before the first of them: each lookup follows every one of
	// those ids.
	b.tableIDs = s.tableIDs(trainerOps)
	after := func(op *dsl.Op) []string {
		if ops.ReadsTable(op.Type) {
			return b.tableIDs[op.Inputs[0]]
		}
		return nil
	}
	if len(b.tableIDs) == 0 {
		after = nil
	}
	for _, op := range canonicalOrder(trainerOps, after) {
		b.add(op)
	}
	for _, op := range t.Ops {
		if op.Type == "recv" || op.Type == "concat" {
			op.Section = dsl.Forward
		}
	}
}

// trainerVars gives the trainer its variables (data, and every param or
// state not owned by a group placed on a pserver) and assigns; it returns
// the trainer's ops and a count of the ops split adds to them.
func (s *splitter) trainerVars(t *dsl.Graph) (trainerOps []*dsl.Op, extra int) {
	g := s.g
	onTrainer := func(gr *group) bool { return gr == nil || gr.pin == trainerNode }
	t.Vars = make(map[string]*dsl.Var, len(g.Vars))
	t.Order = make([]string, 0, len(g.Vars))
	var vars slab.Slab[dsl.Var]
	for _, name := range s.sorted {
		v := g.Vars[name]
		if v.Kind == dsl.KindData || onTrainer(s.owner[name]) {
			c := vars.One()
			*c = *v
			c.Place = ""
			t.AddVar(c)
		}
	}
	trainerOps = s.trainerOps
	for _, gr := range s.byName {
		switch {
		case gr.pin == trainerNode:
			trainerOps = append(trainerOps, gr.ops...)
		case gr.table:
			extra += 2
		default:
			extra += 2 * len(gr.blocks)
			if len(gr.blocks) > 1 {
				extra += 1 + len(gr.blocks)
			}
		}
	}
	for _, a := range g.Assigns {
		if onTrainer(s.owner[a.Target]) {
			t.Assigns = append(t.Assigns, a)
		}
	}
	return trainerOps, extra
}

// trainerBuild appends the trainer's ops, each with the receives its
// parameters need before it and the sends of the gradients it computes
// after it.
type trainerBuild struct {
	s        *splitter
	t        *dsl.Graph
	names    slab.Slab[string]
	copies   slab.Slab[dsl.Op]
	shapes   slab.Slab[int]
	received map[string]bool
	tableIDs map[string][]string
}

func (b *trainerBuild) add(op *dsl.Op) {
	s := b.s
	var inputs []string
	if op.Inputs != nil {
		inputs = b.names.Take(len(op.Inputs))
	}
	for i, in := range op.Inputs {
		inputs[i] = in
		// Trainer ops read no other name a group holds (checkEdges), so
		// the small map of groups by parameter answers.
		gr := s.groups[in]
		if gr == nil {
			continue
		}
		if gr.table {
			inputs[i] = ops.FetchedName(in) // lookups read the rows the trainer fetched
		}
		if gr.pin == trainerNode || b.received[in] {
			continue
		}
		b.received[in] = true
		b.receive(gr, in)
	}
	b.dynamicPositions(op, inputs)
	c := b.copies.One()
	*c = *op
	c.Place = ""
	c.Inputs = inputs
	b.t.Ops = append(b.t.Ops, c)
	for _, out := range op.Outputs {
		pn, ok := strings.CutSuffix(out, ops.GradSuffix)
		if !ok {
			continue // not a gradient
		}
		gr := s.groups[pn]
		if gr == nil || gr.pin == trainerNode || out != dsl.GradName(gr.param.Name) {
			continue
		}
		b.send(gr, out)
	}
}

// receive appends what gives the trainer parameter in of group gr: a
// table's fetch, or the recv of each block (and their concat).
func (b *trainerBuild) receive(gr *group, in string) {
	s, t := b.s, b.t
	if gr.table {
		t.Ops = append(t.Ops, s.fetchOp(gr, b.tableIDs[in]))
		if gr.param.IsDynamic() {
			// Each lookup reads the fetched rows by the positions of its keys.
			for _, ids := range b.tableIDs[in] {
				pos := newOp("dyn_pos", []string{ops.FetchedName(in), ids}, []string{dsl.DynamicPosName(in, ids)}, gr.param.Pos, attr{"var", in})
				pos.Section = dsl.Forward
				t.Ops = append(t.Ops, pos)
			}
		}
		return
	}
	dt := dtypeAttr(gr.param.DType)
	for _, bl := range gr.blocks {
		t.Ops = append(t.Ops, newOp("recv", nil, []string{bl.name}, gr.param.Pos,
			attr{"var", bl.name}, attr{"from", s.nodes[bl.pserver]}, attr{"shape", b.shapes.Clone(bl.shape)}, attr{"dtype", dt}))
	}
	if len(gr.blocks) > 1 {
		parts := make([]string, len(gr.blocks))
		for j, bl := range gr.blocks {
			parts[j] = bl.name
		}
		t.Ops = append(t.Ops, newOp("concat", parts, []string{in}, gr.param.Pos, attr{"axis", 0}))
	}
}

// dynamicPositions points a lookup of a dynamic table, or its gradient,
// at the positions of its keys in the fetched rows (dyn_pos) instead of
// the keys: the rows a trainer fetched are 0..n-1 in the order their keys
// were first met (dsl.LowerDynamic does the same on one node).
func (b *trainerBuild) dynamicPositions(op *dsl.Op, inputs []string) {
	def, _ := ops.Lookup(op.Type)
	if def == nil || len(op.Inputs) < 2 {
		return
	}
	table := ""
	switch {
	case def.ReadsTable:
		table = op.Inputs[0]
	case def.RowGrad && len(op.Inputs) > 2:
		table = op.Inputs[2]
	}
	if gr := b.s.groups[table]; gr != nil && gr.table && gr.param.IsDynamic() {
		inputs[1] = dsl.DynamicPosName(table, op.Inputs[1])
	}
}

// send appends the sends of gradient out of group gr: a table's row
// gradient to every shard, or each block's rows to its pserver.
func (b *trainerBuild) send(gr *group, out string) {
	s, t := b.s, b.t
	if gr.table {
		t.Ops = append(t.Ops, newOp("send_rows", []string{out}, nil, gr.param.Pos, attr{"var", out}, attr{"shards", s.opt.PServers}))
		return
	}
	for _, bl := range gr.blocks {
		if bl.cut() {
			t.Ops = append(t.Ops, newOp("slice_rows", []string{out}, []string{bl.grad}, gr.param.Pos, attr{"start", bl.start}, attr{"end", bl.end}, attr{"axis", 0}))
		}
		t.Ops = append(t.Ops, newOp("send", []string{bl.grad}, nil, gr.param.Pos, attr{"var", bl.grad}, attr{"to", s.nodes[bl.pserver]}))
	}
}

// buildPServers fills the pservers' subgraphs, one block after another in
// name order.
func (s *splitter) buildPServers(p *Plan, blocks []*block) {
	count := s.count
	nops := make([]int, len(p.PServers))
	nvars := make([]int, len(p.PServers))
	nasg := make([]int, len(p.PServers))
	copied, nnames := 0, 0
	for _, b := range blocks {
		nops[b.pserver] += len(b.g.ops) + 2
		nvars[b.pserver] += 1 + len(b.g.state)
		nasg[b.pserver] += len(b.g.assigns)
		copied += len(b.g.ops)
		for _, op := range b.g.ops {
			nnames += len(op.Inputs) + len(op.Outputs)
		}
	}
	for i, ps := range p.PServers {
		ps.Vars = make(map[string]*dsl.Var, nvars[i])
		ps.Order = make([]string, 0, nvars[i])
		ps.Ops = make([]*dsl.Op, 0, nops[i])
		if nasg[i] > 0 {
			ps.Assigns = make([]dsl.Assign, 0, nasg[i])
		}
	}
	copies := slab.Sized[dsl.Op](copied)
	names := slab.Sized[string](nnames)
	var vars slab.Slab[dsl.Var]
	var shapes slab.Slab[int]
	for _, b := range blocks {
		ps := p.PServers[b.pserver]
		gr := b.g
		pn := gr.param.Name
		ren := func(x string) string { return rename(pn, b.name, x) }
		rens := func(in []string) []string {
			if in == nil {
				return nil
			}
			out := names.Take(len(in))
			for i, x := range in {
				out[i] = ren(x)
			}
			return out
		}
		sliced := func(v *dsl.Var) *dsl.Var {
			c := vars.One()
			*c = *v
			c.Name, c.Place, c.Pos = ren(v.Name), "", v.Pos
			if c.Of != "" {
				c.Of = ren(c.Of)
			}
			if dy := v.Dynamic; dy != nil { // a shard of a dynamic table: the keys ShardOf places here
				d := *dy
				d.Shard = &dsl.DynamicShard{Of: v.Name, Index: b.pserver, Count: s.opt.PServers}
				c.Dynamic = &d
			}
			if gr.param.IsDynamic() {
				return c // its rows and state live in the shard's table, shaped [dynamic, ...]
			}
			if (b.cut() || gr.table) && rowAligned(v.Shape, gr.param.Shape, gr.table) {
				c.Shape = shapes.Clone(b.shape)
				if !v.Shape.Equal(gr.param.Shape) { // one value per row: [rows, 1, ...]
					c.Shape = append(ir.Shape{b.shape[0]}, v.Shape[1:]...)
				}
				c.Block = &dsl.Block{Of: v.Name, Start: b.start, End: b.end, Stride: b.stride, Shape: shapes.Clone(v.Shape), Pos: v.Pos}
			}
			return c
		}
		ps.AddVar(sliced(gr.param))
		state := gr.state
		if len(state) > 1 {
			state = sortedVars(state)
		}
		for _, st := range state {
			ps.AddVar(sliced(st))
		}
		grad := b.grad
		if gr.table {
			// Answer the trainers' fetches, then merge their row gradients.
			serve := newOp("serve_rows", []string{b.name}, nil, gr.param.Pos, attr{"var", pn}, attr{"count", count}, attr{"max_rows", gr.maxRows})
			acc := newOp("accumulate_rows", nil, []string{grad}, gr.param.Pos,
				attr{"var", gr.grad}, attr{"count", count}, attr{"shape", shapes.Clone(b.shape)}, attr{"max_rows", gr.maxRows})
			for _, op := range []*dsl.Op{serve, acc} {
				op.Section, op.Param = dsl.Optimize, b.name
			}
			ps.Ops = append(ps.Ops, serve, acc)
		} else {
			acc := newOp("accumulate", nil, []string{grad}, gr.param.Pos,
				attr{"var", grad}, attr{"count", count}, attr{"shape", shapes.Clone(b.shape)}, attr{"dtype", dtypeAttr(gr.param.DType)})
			acc.Section, acc.Param = dsl.Optimize, b.name
			ps.Ops = append(ps.Ops, acc)
		}
		for _, op := range gr.ops { // template order: the same for every parameter
			c := copies.One()
			*c = *op
			c.Inputs, c.Outputs = rens(op.Inputs), rens(op.Outputs)
			c.Param, c.Place = b.name, ""
			ps.Ops = append(ps.Ops, c)
		}
		for _, a := range gr.assigns {
			ps.Assigns = append(ps.Assigns, dsl.Assign{Target: ren(a.Target), Value: ren(a.Value), Pos: a.Pos})
		}
		if gr.table {
			continue // its rows go out by serve_rows
		}
		send := newOp("send", []string{ren(gr.assignValue())}, nil, gr.param.Pos,
			attr{"var", b.name}, attr{"to", trainerNode}, attr{"step_offset", 1}, attr{"reply_to", grad}, attr{"initial", b.name})
		send.Section = dsl.Optimize
		send.Param = b.name
		ps.Ops = append(ps.Ops, send)
	}
}

// rowAligned reports whether a variable of shape v goes with the rows of a
// parameter of shape p into its blocks: v has p's shape, or, for a table,
// one value per row (row-wise adagrad's [V, 1] accumulator; dense row
// blocks never hold such state: blocks.go keeps that parameter whole).
func rowAligned(v, p ir.Shape, table bool) bool {
	if v.Equal(p) {
		return true
	}
	if !table || len(v) != len(p) || len(v) == 0 || v[0] != p[0] {
		return false
	}
	for _, d := range v[1:] {
		if d != 1 {
			return false
		}
	}
	return true
}

// tableIDs lists, for each sharded table, the ids variables of its
// lookups (lookup_table, embedding_bag: ops.ReadsTable), sorted, each once.
func (s *splitter) tableIDs(trainerOps []*dsl.Op) map[string][]string {
	out := map[string][]string{}
	for _, op := range trainerOps {
		if !ops.ReadsTable(op.Type) {
			continue
		}
		if gr := s.groups[op.Inputs[0]]; gr != nil && gr.table && gr.pin != trainerNode && !slices.Contains(out[gr.param.Name], op.Inputs[1]) {
			out[gr.param.Name] = append(out[gr.param.Name], op.Inputs[1])
		}
	}
	for _, ids := range out {
		sort.Strings(ids)
	}
	return out
}

// fetchOp is the trainer's fetch of table gr's rows: the ids of every
// lookup of the table, deduplicated, sent to the shards that own them;
// padding ids (< 0, an embedding_bag's) are not fetched.
func (s *splitter) fetchOp(gr *group, ids []string) *dsl.Op {
	op := newOp("fetch_rows", ids, []string{ops.FetchedName(gr.param.Name)}, gr.param.Pos,
		attr{"var", gr.param.Name}, attr{"shards", s.opt.PServers}, attr{"shape", []int(gr.param.Shape.Clone())})
	op.Section = dsl.Forward
	return op
}

func sortedVarNames(g *dsl.Graph) []string {
	names := make([]string, 0, len(g.Vars))
	for n := range g.Vars {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func sortedVars(vs []*dsl.Var) []*dsl.Var {
	out := append([]*dsl.Var{}, vs...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// buildClipNorm adds train.clip.norm's exchange: pserver j adds up its
// blocks' sums of squares and sends the sum to every trainer (clip@part.j);
// each trainer receives every pserver's, computes the factor
// (dsl.ClipNormOps) and sends it to every pserver (clip@factor.j), which
// takes the mean of the trainers' identical factors (accumulate) as
// dsl.ClipFactor. A pserver's ops are ordered so that their file order is
// a dependency order with the exchange between the gradients' arrival and
// the updates: a pserver runs its ops in that order, one after another.
func (s *splitter) buildClipNorm(p *Plan, blocks []*block) {
	count := s.count
	t, pos := p.Trainer, s.clipPos
	var parts []string
	for j, ps := range p.PServers {
		var sums []string
		for _, b := range blocks {
			if b.pserver == j {
				sums = append(sums, rename(b.g.param.Name, b.name, b.g.param.Name+"@$clip.sumsq"))
			}
		}
		if len(sums) == 0 {
			continue
		}
		part := ops.ClipPart(j)
		factor := ops.ClipFactorOf(j)
		var exchange []*dsl.Op
		total := sums[0]
		for i, x := range sums[1:] {
			next := "clip@part.sum" + strconv.Itoa(i+1)
			exchange = append(exchange, newOp("add", []string{total, x}, []string{next}, pos))
			total = next
		}
		exchange = append(exchange,
			newOp("send", []string{total}, nil, pos, attr{"var", part}, attr{"to", trainerNode}),
			newOp("accumulate", nil, []string{dsl.ClipFactor}, pos, attr{"var", factor}, attr{"count", count}, attr{"shape", []int{}}, attr{"dtype", "f32"}))
		for _, op := range exchange {
			op.Section = dsl.Optimize
		}
		var first, rest []*dsl.Op
		for _, op := range ps.Ops {
			if op.Type == "accumulate" || op.Type == "sum_squares" {
				first = append(first, op)
			} else {
				rest = append(rest, op)
			}
		}
		ps.Ops = append(append(first, exchange...), rest...)

		recv := newOp("recv", nil, []string{part}, pos, attr{"var", part}, attr{"from", pserverNode(j)}, attr{"shape", []int{}}, attr{"dtype", "f32"})
		recv.Section = dsl.Forward
		t.Ops = append(t.Ops, recv)
		parts = append(parts, part)
	}
	t.Ops = append(t.Ops, dsl.ClipNormOps(s.clipNorm, parts, pos)...)
	for j := range p.PServers {
		if !slices.Contains(parts, ops.ClipPart(j)) {
			continue
		}
		t.Ops = append(t.Ops, newOp("send", []string{dsl.ClipFactor}, nil, pos, attr{"var", ops.ClipFactorOf(j)}, attr{"to", pserverNode(j)}))
	}
}
