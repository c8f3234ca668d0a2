package partition

import (
	"container/heap"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
)

// Mode is how pservers combine the trainers' gradients.
type Mode string

const (
	// Sync: every pserver waits for the gradients of all trainers for a step
	// and applies their mean.
	Sync Mode = "sync"
	// Async: every gradient is applied as it arrives.
	Async Mode = "async"
)

// DefaultMinBlockSize is the element count above which a parameter is cut.
const DefaultMinBlockSize = 1 << 20

// Options configures Split.
type Options struct {
	Trainers, PServers int
	Mode               Mode // "" means Sync
	// MinBlockSize: a parameter with more elements is cut into row blocks
	// (0 means DefaultMinBlockSize).
	MinBlockSize int
	// Endpoints optionally gives host:port per pserver, recorded in the plan.
	Endpoints []string
	// Source is the source model's path and SourceSHA256 the hash of its
	// bytes (HashSource); both are only recorded in the plan.
	Source, SourceSHA256 string
}

// Node names used in placements and transfers.
const trainerNode = "trainer"

func pserverNode(i int) string { return "pserver:" + strconv.Itoa(i) }

// BlockName is the variable name of row block j of parameter p.
func BlockName(p string, j int) string { return p + ".b" + strconv.Itoa(j) }

// group is one parameter with everything that lives beside it: its
// optimizer state, its optimize ops and its assigns.
type group struct {
	param   *dsl.Var
	state   []*dsl.Var
	ops     []*dsl.Op
	assigns []dsl.Assign
	local   map[string]bool // names computed or held by the group
	pin     string          // "", "trainer" or "pserver:<i>"
	pinPos  dsl.Pos
	pinBy   string
	blocks  []*block
	whole   string // why the parameter was not cut
	// table: read only through lookup_table (a row gradient), so it is
	// sharded by row id mod M across every pserver and fetched by id.
	table   bool
	maxRows int // the most rows one trainer fetches or sends per step
}

type block struct {
	g          *group
	name       string
	start, end int
	stride     int // a table's shard: rows start, start+stride, ... < end
	shape      ir.Shape
	bytes      int
	pserver    int
}

func (b *block) cut() bool { return len(b.g.blocks) > 1 }

// Split cuts an expanded, checked graph into one trainer subgraph (shared
// by every trainer replica) and one subgraph per pserver, joined by send,
// recv and accumulate ops. It is a pure function of g and opt.
func Split(g *dsl.Graph, opt Options) (*Plan, error) {
	if err := opt.normalize(); err != nil {
		return nil, err
	}
	if g.Train == nil {
		return nil, dsl.Errorf(dsl.Pos{File: g.File}, "the model has no train section; split places a training job (add train: {loss, batch, optimizer})")
	}
	if g.Types == nil {
		if err := g.Check(); err != nil {
			return nil, err
		}
	}
	s := &splitter{g: g, opt: opt, groups: map[string]*group{}}
	if c := g.Train.Clip; c != nil && c.Norm > 0 {
		if opt.Mode == Async {
			return nil, dsl.Errorf(c.Pos, "train.clip.norm needs a sync job: it clips the norm of the trainers' mean gradient, and an async pserver applies each trainer's gradient alone; clip by value (train.clip: {value: V}) or split with --mode sync")
		}
		s.clipNorm, s.clipPos = c.Norm, c.Pos
	}
	steps := []func() error{s.collectGroups, s.checkEdges, s.applyPlaces, s.checkClipNorm, s.cutBlocks}
	for _, f := range steps {
		if err := f(); err != nil {
			return nil, err
		}
	}
	s.assignPServers()
	return s.build(), nil
}

func (o *Options) normalize() error {
	switch {
	case o.Trainers < 1:
		return fmt.Errorf("trainers must be at least 1, got %d", o.Trainers)
	case o.PServers < 1:
		return fmt.Errorf("pservers must be at least 1, got %d", o.PServers)
	case o.MinBlockSize < 0:
		return fmt.Errorf("min block size must be positive, got %d", o.MinBlockSize)
	case len(o.Endpoints) > 0 && len(o.Endpoints) != o.PServers:
		return fmt.Errorf("%d pserver endpoints given for %d pservers; give one host:port per pserver", len(o.Endpoints), o.PServers)
	}
	if o.Mode == "" {
		o.Mode = Sync
	}
	if o.Mode != Sync && o.Mode != Async {
		return fmt.Errorf("mode %q is not sync or async", o.Mode)
	}
	if o.MinBlockSize == 0 {
		o.MinBlockSize = DefaultMinBlockSize
	}
	return nil
}

type splitter struct {
	g      *dsl.Graph
	opt    Options
	groups map[string]*group
	names  []string // parameters with a group, sorted
	owner  map[string]*group
	// trainerOps are the forward and backward ops (and the ops of groups
	// placed on the trainer), in the source's order.
	trainerOps []*dsl.Op
	trainerAsg []dsl.Assign
	warnings   []string
	// clipNorm > 0: train.clip.norm. Each pserver sends the trainers its
	// blocks' sum of squares; every trainer adds them up into the clip
	// factor (dsl.ClipNormOps) and sends it back to every pserver, which
	// multiplies its blocks' mean gradients by it.
	clipNorm float64
	clipPos  dsl.Pos
}

// isClipNormOp reports whether op is one of dsl.ClipNormOps: the ops that
// read every parameter's sum of squares, rebuilt on the trainers by split.
func isClipNormOp(op *dsl.Op) bool {
	return op.Section != dsl.Optimize && len(op.Outputs) == 1 && strings.HasPrefix(op.Outputs[0], "clip@")
}

// checkClipNorm refuses train.clip.norm where a parameter's mean gradient
// is not on a pserver: a parameter placed on the trainer (each trainer
// would add its own gradient's part) and a lookup table (a row gradient).
func (s *splitter) checkClipNorm() error {
	if s.clipNorm == 0 {
		return nil
	}
	for _, n := range s.names {
		gr := s.groups[n]
		switch {
		case gr.pin == trainerNode:
			return dsl.Errorf(s.clipPos, "train.clip.norm in a split job needs every parameter's update on a pserver, but %s is placed on the trainer (%s); drop its place: trainer or clip by value", n, gr.pinPos)
		case gr.table:
			return dsl.Errorf(s.clipPos, "train.clip.norm is not supported for lookup table %s (a row gradient) yet; clip by value", n)
		}
	}
	return nil
}

// collectGroups finds each parameter's optimizer subgraph through the
// section and param marks of optimizer expansion.
func (s *splitter) collectGroups() error {
	g := s.g
	var errs dsl.ErrorList
	for _, op := range g.Ops {
		if op.Section != dsl.Optimize {
			continue
		}
		v := g.Vars[op.Param]
		switch {
		case op.Param == "":
			errs = append(errs, dsl.Errorf(op.Pos, "op %s is in section optimize but names no param; add param: <the parameter it updates> so split can place it with that parameter", op.Type))
			continue
		case v == nil || v.Kind != dsl.KindParam:
			errs = append(errs, dsl.Errorf(op.Pos, "op %s updates param %q, which is not a declared parameter", op.Type, op.Param))
			continue
		}
		gr := s.groups[op.Param]
		if gr == nil {
			gr = &group{param: v, local: map[string]bool{v.Name: true}}
			s.groups[op.Param] = gr
		}
		gr.ops = append(gr.ops, op)
		for _, o := range op.Outputs {
			gr.local[o] = true
		}
	}
	if len(errs) > 0 {
		return errs
	}
	if len(s.groups) == 0 {
		return dsl.Errorf(g.Train.Pos, "the model has no optimizer ops, so nothing would run on the pservers; add train.optimizer")
	}
	for n := range s.groups {
		s.names = append(s.names, n)
	}
	sort.Strings(s.names)
	s.owner = map[string]*group{}
	for _, n := range s.names {
		gr := s.groups[n]
		for k := range gr.local {
			s.owner[k] = gr
		}
	}
	// State belongs to the parameter named by `of`, or to the group whose
	// ops read it.
	readers := map[string]*group{}
	for _, n := range s.names {
		for _, op := range s.groups[n].ops {
			for _, in := range op.Inputs {
				if v := g.Vars[in]; v != nil && v.Kind == dsl.KindState {
					if other := readers[in]; other != nil && other != s.groups[n] {
						return dsl.Errorf(op.Pos, "state %q is read by the optimizers of both %s and %s; each optimizer state belongs to one parameter", in, other.param.Name, n)
					}
					readers[in] = s.groups[n]
				}
			}
		}
	}
	for _, name := range sortedVarNames(g) {
		v := g.Vars[name]
		if v.Kind != dsl.KindState {
			continue
		}
		gr := readers[name]
		if v.Of != "" {
			if og := s.groups[v.Of]; og != nil {
				if gr != nil && gr != og {
					return dsl.Errorf(v.Pos, "state %q belongs to %s (of:) but is read by the optimizer of %s", name, v.Of, gr.param.Name)
				}
				gr = og
			}
		}
		if gr == nil {
			continue // trainer-side state
		}
		gr.state = append(gr.state, v)
		gr.local[name] = true
		s.owner[name] = gr
	}
	for _, a := range g.Assigns {
		if gr := s.owner[a.Target]; gr != nil {
			if s.owner[a.Value] != gr {
				return dsl.Errorf(a.Pos, "assign %s = %s: the new value of %s must be computed by its optimizer (section optimize, param %s)", a.Target, a.Value, a.Target, gr.param.Name)
			}
			gr.assigns = append(gr.assigns, a)
		} else {
			s.trainerAsg = append(s.trainerAsg, a)
		}
	}
	for _, n := range s.names {
		if t := g.Types[dsl.GradName(n)]; t.Sparse() {
			gr := s.groups[n]
			gr.table, gr.maxRows = true, t.MaxRows
		}
	}
	for _, n := range s.names {
		gr := s.groups[n]
		if gr.assignValue() == "" {
			return dsl.Errorf(gr.param.Pos, "param %s has optimizer ops but no assign %s = <new value>; the pserver would never update it", n, n)
		}
	}
	for _, op := range g.Ops {
		if op.Section != dsl.Optimize && !(s.clipNorm > 0 && isClipNormOp(op)) {
			s.trainerOps = append(s.trainerOps, op)
		}
	}
	return nil
}

func (gr *group) assignValue() string {
	for _, a := range gr.assigns {
		if a.Target == gr.param.Name {
			return a.Value
		}
	}
	return ""
}

// checkEdges refuses edges between the trainer and a pserver other than
// the parameter going down and its gradient going up: those are the only
// transfers the runtime serves.
func (s *splitter) checkEdges() error {
	prod := s.g.Producers()
	for _, n := range s.names {
		gr := s.groups[n]
		grad := dsl.GradName(n)
		for _, op := range gr.ops {
			for _, in := range op.Inputs {
				if gr.local[in] || in == grad || s.clipNorm > 0 && in == dsl.ClipFactor {
					continue
				}
				return dsl.Errorf(op.Pos, "op %s in the optimizer of %s reads %q, which is not %s, its gradient, its state or a value its optimizer computes; pserver-side ops cannot read trainer values, so compute %q inside the optimizer", op.Type, n, in, n, in)
			}
		}
		if _, ok := prod[grad]; !ok {
			return dsl.Errorf(gr.param.Pos, "the optimizer of %s reads %s, which no op computes", n, grad)
		}
	}
	for _, op := range s.trainerOps {
		for _, in := range op.Inputs {
			if gr := s.owner[in]; gr != nil && in != gr.param.Name {
				return dsl.Errorf(op.Pos, "op %s reads %q, optimizer state of %s that lives on a pserver; trainer ops may read the parameter itself but not its optimizer's values", op.Type, in, gr.param.Name)
			}
		}
	}
	if t := s.g.Train; t != nil {
		for _, m := range append([]string{t.Loss}, t.Metrics...) {
			if gr := s.owner[m]; gr != nil && m != "" {
				return dsl.Errorf(t.Pos, "train reports %q, a value of the optimizer of %s, which runs on a pserver; report trainer values", m, gr.param.Name)
			}
		}
	}
	return nil
}

// applyPlaces resolves `place:` overrides into one pin per group.
func (s *splitter) applyPlaces() error {
	M := s.opt.PServers
	check := func(place string, pos dsl.Pos, what string) error {
		if i, ok := strings.CutPrefix(place, "pserver:"); ok {
			if n, _ := strconv.Atoi(i); n >= M {
				return dsl.Errorf(pos, "%s has place: %s but the job has %d pservers (pserver:0 to pserver:%d); lower the index or pass --pservers %d", what, place, M, M-1, n+1)
			}
		}
		return nil
	}
	for _, op := range s.trainerOps {
		if strings.HasPrefix(op.Place, "pserver") {
			return dsl.Errorf(op.Pos, "op %s (%s) has place: %s, but forward and backward ops run on the trainer replicas; only parameters, their state and their optimizer go to pservers, so remove place", op.Type, op.Section, op.Place)
		}
	}
	for _, name := range s.g.Params() {
		v := s.g.Vars[name]
		if s.groups[name] == nil && strings.HasPrefix(v.Place, "pserver") {
			return dsl.Errorf(v.Pos, "param %s has place: %s, but no optimizer updates it (it has no gradient), so it stays on the trainer; remove place", name, v.Place)
		}
	}
	for _, n := range s.names {
		gr := s.groups[n]
		merge := func(place string, pos dsl.Pos, what string) error {
			if place == "" || place == "pserver" {
				return nil
			}
			if err := check(place, pos, what); err != nil {
				return err
			}
			if gr.pin != "" && gr.pin != place {
				return dsl.Errorf(pos, "%s has place: %s, but %s at %s places parameter %s on %s; a parameter, its state and its optimizer live on one node", what, place, gr.pinBy, gr.pinPos, n, gr.pin)
			}
			if gr.pin == "" {
				gr.pin, gr.pinPos, gr.pinBy = place, pos, what
			}
			return nil
		}
		if err := merge(gr.param.Place, gr.param.Pos, "param "+n); err != nil {
			return err
		}
		for _, st := range gr.state {
			if err := merge(st.Place, st.Pos, "state "+st.Name); err != nil {
				return err
			}
		}
		for _, op := range gr.ops {
			if err := merge(op.Place, op.Pos, "op "+op.Type+" (optimizer of "+n+")"); err != nil {
				return err
			}
		}
		if gr.table && gr.pin != "" {
			return dsl.Errorf(gr.pinPos, "%s has place: %s, but %s is a lookup table (read only through lookup_table), which split shards by row id across every pserver; remove place", gr.pinBy, gr.pin, n)
		}
		if gr.pin == trainerNode && s.opt.Trainers > 1 {
			return dsl.Errorf(gr.pinPos, "%s has place: trainer, but with %d trainers every replica would update its own copy of %s and the replicas would drift apart; remove place (or split for one trainer)", gr.pinBy, s.opt.Trainers, n)
		}
	}
	return nil
}

// cutBlocks decides, per parameter, whether it is cut into row blocks.
func (s *splitter) cutBlocks() error {
	for _, n := range s.names {
		gr := s.groups[n]
		shape := gr.param.Shape
		if gr.table {
			if err := s.shardTable(gr); err != nil {
				return err
			}
			continue
		}
		numel := shape.Numel()
		nb := 1
		switch {
		case gr.pin == trainerNode:
			gr.whole = "place: trainer"
		case gr.pin != "":
			gr.whole = "place: " + gr.pin + " (" + gr.pinBy + ")"
		case numel <= s.opt.MinBlockSize:
			gr.whole = fmt.Sprintf("%d elements <= min_block_size %d", numel, s.opt.MinBlockSize)
		case s.opt.PServers == 1:
			gr.whole = "one pserver"
		case len(shape) == 0 || shape[0] < 2:
			gr.whole = "a single row cannot be cut along dim 0"
		default:
			if why := s.notElementWise(gr); why != "" {
				gr.whole = why
			} else {
				nb = min((numel+s.opt.MinBlockSize-1)/s.opt.MinBlockSize, s.opt.PServers, shape[0])
			}
		}
		rows := 1
		if len(shape) > 0 {
			rows = shape[0]
		}
		start := 0
		for j := range nb {
			r := rows / nb
			if j < rows%nb {
				r++
			}
			b := &block{g: gr, name: n, start: start, end: start + r, pserver: -1}
			if nb > 1 {
				b.name = BlockName(n, j)
				b.shape = append(ir.Shape{r}, shape[1:]...)
			} else {
				b.shape = shape.Clone()
			}
			b.bytes = b.shape.Numel() * gr.param.DType.Size()
			if len(shape) == 0 {
				b.bytes = gr.param.DType.Size()
			}
			gr.blocks = append(gr.blocks, b)
			start += r
		}
	}
	return nil
}

// shardTable cuts a lookup table into one shard per pserver: row r goes
// to pserver r mod M as its local row r div M, so the ids of a batch
// spread over every pserver whatever their distribution's head.
func (s *splitter) shardTable(gr *group) error {
	shape, m := gr.param.Shape, s.opt.PServers
	if shape[0] < m {
		return dsl.Errorf(gr.param.Pos, "lookup table %s has %d rows, fewer than the %d pservers it would be sharded over; use at most %d pservers", gr.param.Name, shape[0], m, shape[0])
	}
	gr.whole = fmt.Sprintf("a lookup table: sharded by row id mod %d (row r on pserver r mod %d as its local row r div %d)", m, m, m)
	for j := range m {
		rows := (shape[0] - j + m - 1) / m
		b := &block{g: gr, name: ShardName(gr.param.Name, j), start: j, end: shape[0], stride: m, pserver: j,
			shape: append(ir.Shape{rows}, shape[1:]...)}
		b.bytes = b.shape.Numel() * gr.param.DType.Size()
		gr.blocks = append(gr.blocks, b)
	}
	return nil
}

// ShardName is the variable name of shard j of lookup table p.
func ShardName(p string, j int) string { return p + ".s" + strconv.Itoa(j) }

// notElementWise explains why a parameter's optimizer cannot run on row
// blocks, or returns "". It can when every op is element-wise and every
// value it touches has the parameter's shape (cut like the parameter) or
// one element (a scalar such as adam's beta1_pow, kept whole in every
// block, where it evolves identically).
func (s *splitter) notElementWise(gr *group) string {
	shape := gr.param.Shape
	fits := func(name string) bool {
		t := s.g.Types[name]
		return t.Shape.Equal(shape) || t.Shape.Numel() == 1
	}
	for _, st := range gr.state {
		if !fits(st.Name) {
			return fmt.Sprintf("state %s has shape %v, neither %s's shape %v nor a scalar", st.Name, st.Shape, gr.param.Name, shape)
		}
	}
	for _, op := range gr.ops {
		def, _ := ops.Lookup(op.Type)
		if op.Type == "sum_squares" && s.clipNorm > 0 {
			continue // a block's part of the norm, added up with the others
		}
		if !def.ElementWise {
			return fmt.Sprintf("optimizer op %s at %s is not element-wise", op.Type, op.Pos)
		}
		for _, x := range append(append([]string{}, op.Inputs...), op.Outputs...) {
			if !fits(x) {
				return fmt.Sprintf("optimizer op %s at %s touches %s of shape %v, neither %s's shape %v nor a scalar", op.Type, op.Pos, x, s.g.Types[x].Shape, gr.param.Name, shape)
			}
		}
	}
	return ""
}

// assignPServers places blocks by bytes: pinned blocks first, then the
// others largest first (ties by name) on the least loaded pserver (ties by
// index) that holds no other block of the same parameter.
func (s *splitter) assignPServers() {
	load := make([]int, s.opt.PServers)
	var free []*block
	for _, n := range s.names {
		gr := s.groups[n]
		for _, b := range gr.blocks {
			switch {
			case gr.pin == trainerNode:
			case gr.table:
				load[b.pserver] += b.bytes
			case gr.pin != "":
				b.pserver, _ = strconv.Atoi(strings.TrimPrefix(gr.pin, "pserver:"))
				load[b.pserver] += b.bytes
			default:
				free = append(free, b)
			}
		}
	}
	sort.Slice(free, func(i, j int) bool {
		if free[i].bytes != free[j].bytes {
			return free[i].bytes > free[j].bytes
		}
		return free[i].name < free[j].name
	})
	for _, b := range free {
		best := -1
		for i := range load {
			if b.cut() && b.g.holds(i) {
				continue
			}
			if best < 0 || load[i] < load[best] {
				best = i
			}
		}
		b.pserver = best
		load[best] += b.bytes
	}
}

func (gr *group) holds(pserver int) bool {
	for _, b := range gr.blocks {
		if b.pserver == pserver {
			return true
		}
	}
	return false
}

// rename maps a group's names onto a block: p -> block, p@x -> block@x.
func rename(p, blk, name string) string {
	if p == blk {
		return name
	}
	if name == p {
		return blk
	}
	if rest, ok := strings.CutPrefix(name, p+"@"); ok {
		return blk + "@" + rest
	}
	return name
}

// newOp builds an op with every default attribute filled in, as Parse
// would, so the written file reads back into the same op.
func newOp(typ string, inputs, outputs []string, attrs ops.Attrs, pos dsl.Pos) *dsl.Op {
	return dsl.NewOp(typ, inputs, outputs, attrs, dsl.Backward, pos)
}

func dtypeAttr(d ir.DType) string {
	if d == ir.I32 {
		return "i32"
	}
	return "f32"
}

func (s *splitter) build() *Plan {
	g, opt := s.g, s.opt
	p := &Plan{Trainer: &dsl.Graph{Name: g.Name, File: "trainer.yaml", Vars: map[string]*dsl.Var{}, Data: g.Data}}
	t := p.Trainer
	t.Train = &dsl.Train{Loss: g.Train.Loss, Metrics: g.Train.Metrics, Batch: g.Train.Batch, Steps: g.Train.Steps, Epochs: g.Train.Epochs, EvalEvery: g.Train.EvalEvery, Pos: g.Train.Pos}
	for i := range opt.PServers {
		p.PServers = append(p.PServers, &dsl.Graph{Name: g.Name, File: PServerFile(i), Vars: map[string]*dsl.Var{},
			Train: &dsl.Train{Batch: g.Train.Batch, Steps: g.Train.Steps, Epochs: g.Train.Epochs, Pos: g.Train.Pos}})
	}
	// Trainer variables: data, and every param or state not owned by a
	// group placed on a pserver.
	onTrainer := func(gr *group) bool { return gr == nil || gr.pin == trainerNode }
	for _, name := range sortedVarNames(g) {
		v := g.Vars[name]
		if v.Kind == dsl.KindData || onTrainer(s.owner[name]) {
			c := *v
			c.Place = ""
			t.AddVar(&c)
		}
	}
	trainerOps := s.trainerOps
	for _, n := range s.names {
		if gr := s.groups[n]; gr.pin == trainerNode {
			trainerOps = append(trainerOps, gr.ops...)
		}
	}
	for _, a := range g.Assigns {
		if onTrainer(s.owner[a.Target]) {
			t.Assigns = append(t.Assigns, a)
		}
	}

	// Trainer ops in a canonical order, with recvs before the first reader
	// of a parameter and sends right after its gradient is computed.
	received := map[string]bool{}
	for _, op := range canonicalOrder(trainerOps) {
		for _, in := range op.Inputs {
			gr := s.owner[in]
			if gr == nil || gr.pin == trainerNode || in != gr.param.Name || received[in] {
				continue
			}
			received[in] = true
			if gr.table {
				t.Ops = append(t.Ops, s.fetchOp(gr, trainerOps))
				continue
			}
			var parts []string
			for _, b := range gr.blocks {
				t.Ops = append(t.Ops, newOp("recv", nil, []string{b.name}, ops.Attrs{
					"var": b.name, "from": pserverNode(b.pserver), "shape": []int(b.shape.Clone()), "dtype": dtypeAttr(gr.param.DType)}, gr.param.Pos))
				parts = append(parts, b.name)
			}
			if len(parts) > 1 {
				t.Ops = append(t.Ops, newOp("concat", parts, []string{in}, ops.Attrs{"axis": 0}, gr.param.Pos))
			}
		}
		c := *op
		c.Place = ""
		c.Inputs = mapNames(op.Inputs, func(x string) string {
			if gr := s.owner[x]; gr != nil && gr.table && x == gr.param.Name {
				return FetchedName(x) // lookups read the rows the trainer fetched
			}
			return x
		})
		t.Ops = append(t.Ops, &c)
		for _, out := range op.Outputs {
			gr := s.groups[strings.TrimSuffix(out, "@GRAD")]
			if gr == nil || gr.pin == trainerNode || out != dsl.GradName(gr.param.Name) {
				continue
			}
			if gr.table {
				t.Ops = append(t.Ops, newOp("send_rows", []string{out}, nil, ops.Attrs{"var": out, "shards": opt.PServers}, gr.param.Pos))
				continue
			}
			for _, b := range gr.blocks {
				grad := dsl.GradName(b.name)
				if b.cut() {
					t.Ops = append(t.Ops, newOp("slice_rows", []string{out}, []string{grad}, ops.Attrs{"start": b.start, "end": b.end, "axis": 0}, gr.param.Pos))
				}
				t.Ops = append(t.Ops, newOp("send", []string{grad}, nil, ops.Attrs{"var": grad, "to": pserverNode(b.pserver)}, gr.param.Pos))
			}
		}
	}

	// Pserver subgraphs, one block after another in name order.
	count := opt.Trainers
	if opt.Mode == Async {
		count = 1
	}
	var blocks []*block
	for _, n := range s.names {
		for _, b := range s.groups[n].blocks {
			if b.pserver >= 0 {
				blocks = append(blocks, b)
			}
		}
	}
	sort.Slice(blocks, func(i, j int) bool { return blocks[i].name < blocks[j].name })
	for _, b := range blocks {
		ps := p.PServers[b.pserver]
		gr := b.g
		pn := gr.param.Name
		ren := func(x string) string { return rename(pn, b.name, x) }
		sliced := func(v *dsl.Var) *dsl.Var {
			c := *v
			c.Name, c.Place, c.Pos = ren(v.Name), "", v.Pos
			if c.Of != "" {
				c.Of = ren(c.Of)
			}
			if (b.cut() || gr.table) && v.Shape.Equal(gr.param.Shape) {
				c.Shape = b.shape.Clone()
				c.Block = &dsl.Block{Of: v.Name, Start: b.start, End: b.end, Stride: b.stride, Shape: v.Shape.Clone(), Pos: v.Pos}
			}
			return &c
		}
		ps.AddVar(sliced(gr.param))
		for _, st := range sortedVars(gr.state) {
			ps.AddVar(sliced(st))
		}
		grad := dsl.GradName(b.name)
		if gr.table {
			// Answer the trainers' fetches, then merge their row gradients.
			serve := newOp("serve_rows", []string{b.name}, nil, ops.Attrs{"var": pn, "count": count, "max_rows": gr.maxRows}, gr.param.Pos)
			acc := newOp("accumulate_rows", nil, []string{grad}, ops.Attrs{
				"var": dsl.GradName(pn), "count": count, "shape": []int(b.shape.Clone()), "max_rows": gr.maxRows}, gr.param.Pos)
			for _, op := range []*dsl.Op{serve, acc} {
				op.Section, op.Param = dsl.Optimize, b.name
			}
			ps.Ops = append(ps.Ops, serve, acc)
		} else {
			ps.Ops = append(ps.Ops, newOp("accumulate", nil, []string{grad}, ops.Attrs{
				"var": grad, "count": count, "shape": []int(b.shape.Clone()), "dtype": dtypeAttr(gr.param.DType)}, gr.param.Pos))
			acc := ps.Ops[len(ps.Ops)-1]
			acc.Section, acc.Param = dsl.Optimize, b.name
		}
		for _, op := range gr.ops { // template order: the same for every parameter
			c := *op
			c.Inputs, c.Outputs = mapNames(op.Inputs, ren), mapNames(op.Outputs, ren)
			c.Param, c.Place = b.name, ""
			ps.Ops = append(ps.Ops, &c)
		}
		for _, a := range gr.assigns {
			ps.Assigns = append(ps.Assigns, dsl.Assign{Target: ren(a.Target), Value: ren(a.Value), Pos: a.Pos})
		}
		if gr.table {
			continue // its rows go out by serve_rows
		}
		send := newOp("send", []string{ren(gr.assignValue())}, nil, ops.Attrs{
			"var": b.name, "to": trainerNode, "step_offset": 1, "reply_to": grad, "initial": b.name}, gr.param.Pos)
		send.Section = dsl.Optimize
		send.Param = b.name
		ps.Ops = append(ps.Ops, send)
	}
	for _, op := range t.Ops {
		if op.Type == "recv" || op.Type == "concat" {
			op.Section = dsl.Forward
		}
	}
	if s.clipNorm > 0 {
		s.buildClipNorm(p, blocks, count)
	}
	s.describe(p, blocks)
	return p
}

// FetchedName is the trainer's variable holding the rows of lookup table
// p that it fetched this step.
func FetchedName(p string) string { return p + "@fetched" }

// fetchOp is the trainer's fetch of table gr's rows: the ids of every
// lookup of the table, deduplicated, sent to the shards that own them.
func (s *splitter) fetchOp(gr *group, trainerOps []*dsl.Op) *dsl.Op {
	var ids []string
	seen := map[string]bool{}
	for _, op := range trainerOps {
		if op.Type == "lookup_table" && op.Inputs[0] == gr.param.Name && !seen[op.Inputs[1]] {
			seen[op.Inputs[1]] = true
			ids = append(ids, op.Inputs[1])
		}
	}
	sort.Strings(ids)
	op := newOp("fetch_rows", ids, []string{FetchedName(gr.param.Name)}, ops.Attrs{
		"var": gr.param.Name, "shards": s.opt.PServers, "shape": []int(gr.param.Shape.Clone())}, gr.param.Pos)
	op.Section = dsl.Forward
	return op
}

func mapNames(in []string, f func(string) string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, x := range in {
		out[i] = f(x)
	}
	return out
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

// opKey orders ready ops canonically: forward before backward, then by
// first output, so the order never depends on the order ops were declared in.
func opKey(op *dsl.Op) string {
	sec := string(rune('0' + op.Section))
	if len(op.Outputs) > 0 {
		return sec + op.Outputs[0]
	}
	return sec + "\xff" + op.Type + "|" + strings.Join(op.Inputs, ",")
}

type opHeap struct {
	ops  []*dsl.Op
	keys []string
	idx  []int
}

func (h *opHeap) Len() int           { return len(h.idx) }
func (h *opHeap) Less(i, j int) bool { return h.keys[h.idx[i]] < h.keys[h.idx[j]] }
func (h *opHeap) Swap(i, j int)      { h.idx[i], h.idx[j] = h.idx[j], h.idx[i] }
func (h *opHeap) Push(x any)         { h.idx = append(h.idx, x.(int)) }
func (h *opHeap) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}

// canonicalOrder sorts ops topologically, ready ops by opKey.
func canonicalOrder(list []*dsl.Op) []*dsl.Op {
	prod := make(map[string]int, len(list))
	for i, op := range list {
		for _, o := range op.Outputs {
			prod[o] = i
		}
	}
	indeg := make([]int, len(list))
	users := make([][]int, len(list))
	for i, op := range list {
		for _, in := range op.Inputs {
			if j, ok := prod[in]; ok {
				indeg[i]++
				users[j] = append(users[j], i)
			}
		}
	}
	h := &opHeap{ops: list, keys: make([]string, len(list))}
	for i, op := range list {
		h.keys[i] = opKey(op)
		if indeg[i] == 0 {
			h.idx = append(h.idx, i)
		}
	}
	heap.Init(h)
	out := make([]*dsl.Op, 0, len(list))
	for h.Len() > 0 {
		i := heap.Pop(h).(int)
		out = append(out, list[i])
		for _, u := range users[i] {
			if indeg[u]--; indeg[u] == 0 {
				heap.Push(h, u)
			}
		}
	}
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
func (s *splitter) buildClipNorm(p *Plan, blocks []*block, count int) {
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
		part := "clip@part." + strconv.Itoa(j)
		factor := "clip@factor." + strconv.Itoa(j)
		var exchange []*dsl.Op
		total := sums[0]
		for i, x := range sums[1:] {
			next := "clip@part.sum" + strconv.Itoa(i+1)
			exchange = append(exchange, newOp("add", []string{total, x}, []string{next}, nil, pos))
			total = next
		}
		exchange = append(exchange,
			newOp("send", []string{total}, nil, ops.Attrs{"var": part, "to": trainerNode}, pos),
			newOp("accumulate", nil, []string{dsl.ClipFactor}, ops.Attrs{"var": factor, "count": count, "shape": []int{}, "dtype": "f32"}, pos))
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

		recv := newOp("recv", nil, []string{part}, ops.Attrs{"var": part, "from": pserverNode(j), "shape": []int{}, "dtype": "f32"}, pos)
		recv.Section = dsl.Forward
		t.Ops = append(t.Ops, recv)
		parts = append(parts, part)
	}
	t.Ops = append(t.Ops, dsl.ClipNormOps(s.clipNorm, parts, pos)...)
	for j := range p.PServers {
		if !slices.Contains(parts, "clip@part."+strconv.Itoa(j)) {
			continue
		}
		t.Ops = append(t.Ops, newOp("send", []string{dsl.ClipFactor}, nil, ops.Attrs{"var": "clip@factor." + strconv.Itoa(j), "to": pserverNode(j)}, pos))
	}
}
