package partition

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

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
	param    *dsl.Var
	state    []*dsl.Var
	ops      []*dsl.Op
	assigns  []dsl.Assign
	grad     string // the parameter's gradient
	computed bool   // some op computes grad
	pin      string // "", "trainer" or "pserver:<i>"
	pinPos   dsl.Pos
	pinBy    string
	blocks   []*block
	whole    string // why the parameter was not cut
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
	grad       string // the block's gradient
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
	byName []*group // their groups, in that order
	sorted []string // every variable's name, sorted
	// owner is the group that holds a name (see collectGroups); shared
	// the other groups holding it, if any.
	owner  map[string]*group
	shared map[string][]*group
	nodes  []string // pserverNode(i)
	count  int      // the gradients an accumulate waits for
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
	for _, gr := range s.byName {
		n := gr.param.Name
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
//
// A group's names (its parameter, the outputs of its ops and its state)
// are recorded in s.owner, one map for every group: after Check no name
// is held by two groups, and where one is (a graph changed after its
// check) s.shared keeps the others, so isLocal and owner answer as
// per-group sets would.
func (s *splitter) collectGroups() error {
	g := s.g
	// The sorted variable names are needed below and by build; sort them
	// while the ops are grouped.
	sorted := make(chan []string, 1)
	go func() { sorted <- sortedVarNames(g) }()
	var errs dsl.ErrorList
	nOpt, nOut := 0, 0
	for _, op := range g.Ops {
		if op.Section == dsl.Optimize {
			nOpt++
			nOut += len(op.Outputs)
		}
	}
	s.groups = make(map[string]*group, min(nOpt, len(g.Vars)))
	s.owner = make(map[string]*group, nOut+len(g.Vars))
	var last *group // an optimizer's ops come one parameter after another
	for _, op := range g.Ops {
		if op.Section != dsl.Optimize {
			continue
		}
		if last != nil && op.Param == last.param.Name {
			last.ops = append(last.ops, op)
			for _, o := range op.Outputs {
				s.addLocal(o, last, false)
			}
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
			gr = &group{param: v, grad: dsl.GradName(op.Param)}
			s.groups[op.Param] = gr
			s.addLocal(v.Name, gr, false)
		}
		gr.ops = append(gr.ops, op)
		for _, o := range op.Outputs {
			s.addLocal(o, gr, false)
		}
		last = gr
	}
	if len(errs) > 0 {
		return errs
	}
	if len(s.groups) == 0 {
		return dsl.Errorf(g.Train.Pos, "the model has no optimizer ops, so nothing would run on the pservers; add train.optimizer")
	}
	s.names = make([]string, 0, len(s.groups))
	for n := range s.groups {
		s.names = append(s.names, n)
	}
	sort.Strings(s.names)
	s.byName = make([]*group, len(s.names))
	for i, n := range s.names {
		s.byName[i] = s.groups[n]
	}
	// State belongs to the parameter named by `of`, or to the group whose
	// ops read it. The lookups run in parts (they only read); what they
	// find is taken in name order.
	type read struct {
		state string
		gr    *group
		op    *dsl.Op
	}
	reads := inParts(len(s.names), func(lo, hi int) (out []read) {
		for _, gr := range s.byName[lo:hi] {
			for _, op := range gr.ops {
				for _, in := range op.Inputs {
					if v := g.Vars[in]; v != nil && v.Kind == dsl.KindState {
						out = append(out, read{in, gr, op})
					}
				}
			}
		}
		return out
	})
	readers := map[string]*group{}
	for _, r := range reads {
		if other := readers[r.state]; other != nil && other != r.gr {
			return dsl.Errorf(r.op.Pos, "state %q is read by the optimizers of both %s and %s; each optimizer state belongs to one parameter", r.state, other.param.Name, r.gr.param.Name)
		}
		readers[r.state] = r.gr
	}
	s.sorted = <-sorted
	states := inParts(len(s.sorted), func(lo, hi int) (out []*dsl.Var) {
		for _, name := range s.sorted[lo:hi] {
			if v := g.Vars[name]; v.Kind == dsl.KindState {
				out = append(out, v)
			}
		}
		return out
	})
	for _, v := range states {
		name := v.Name
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
		s.addLocal(name, gr, true)
	}
	owners := inParts(len(g.Assigns), func(lo, hi int) (out [][2]*group) {
		for _, a := range g.Assigns[lo:hi] {
			out = append(out, [2]*group{s.owner[a.Target], s.owner[a.Value]})
		}
		return out
	})
	for i, a := range g.Assigns {
		if gr := owners[i][0]; gr != nil {
			if owners[i][1] != gr {
				return dsl.Errorf(a.Pos, "assign %s = %s: the new value of %s must be computed by its optimizer (section optimize, param %s)", a.Target, a.Value, a.Target, gr.param.Name)
			}
			gr.assigns = append(gr.assigns, a)
		} else {
			s.trainerAsg = append(s.trainerAsg, a)
		}
	}
	for _, gr := range s.byName {
		n := gr.param.Name
		if t := g.Types[gr.grad]; t.Sparse() {
			gr.table, gr.maxRows = true, t.MaxRows
		}
		if gr.assignValue() == "" {
			return dsl.Errorf(gr.param.Pos, "param %s has optimizer ops but no assign %s = <new value>; the pserver would never update it", n, n)
		}
	}
	s.trainerOps = make([]*dsl.Op, 0, len(g.Ops)-nOpt)
	for _, op := range g.Ops {
		if op.Section != dsl.Optimize && !(s.clipNorm > 0 && isClipNormOp(op)) {
			s.trainerOps = append(s.trainerOps, op)
		}
	}
	return nil
}

// addLocal records that gr holds name (computes it or keeps it beside its
// parameter). The owner of a name held by several groups is the last
// group in name order that holds it, or with state the group it belongs
// to (state: true); the others are kept in s.shared.
func (s *splitter) addLocal(name string, gr *group, state bool) {
	old := s.owner[name]
	switch {
	case old == nil:
		s.owner[name] = gr
	case old == gr:
	case state || old.param.Name < gr.param.Name:
		s.share(name, old)
		s.owner[name] = gr
	default:
		s.share(name, gr)
	}
}

func (s *splitter) share(name string, gr *group) {
	if s.shared == nil {
		s.shared = map[string][]*group{}
	}
	if !slices.Contains(s.shared[name], gr) {
		s.shared[name] = append(s.shared[name], gr)
	}
}

// isLocal reports whether gr holds name.
func (s *splitter) isLocal(gr *group, name string) bool {
	return s.owner[name] == gr || s.shared != nil && slices.Contains(s.shared[name], gr)
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
	// Which parameters' gradients some op computes (names ending in @GRAD
	// are the only candidates). The loops below only read, and run in
	// parts; the first error in order is reported.
	for _, gr := range inParts(len(s.g.Ops), func(lo, hi int) (out []*group) {
		for _, op := range s.g.Ops[lo:hi] {
			for _, o := range op.Outputs {
				if p, ok := strings.CutSuffix(o, "@GRAD"); ok {
					if gr := s.groups[p]; gr != nil && gr.grad == o {
						out = append(out, gr)
					}
				}
			}
		}
		return out
	}) {
		gr.computed = true
	}
	errs := inParts(len(s.names), func(lo, hi int) []error {
		for _, gr := range s.byName[lo:hi] {
			n := gr.param.Name
			grad := gr.grad
			for _, op := range gr.ops {
				for _, in := range op.Inputs {
					if in == grad || s.isLocal(gr, in) || s.clipNorm > 0 && in == dsl.ClipFactor {
						continue
					}
					return []error{dsl.Errorf(op.Pos, "op %s in the optimizer of %s reads %q, which is not %s, its gradient, its state or a value its optimizer computes; pserver-side ops cannot read trainer values, so compute %q inside the optimizer", op.Type, n, in, n, in)}
				}
			}
			if !gr.computed {
				return []error{dsl.Errorf(gr.param.Pos, "the optimizer of %s reads %s, which no op computes", n, grad)}
			}
		}
		return nil
	})
	if len(errs) > 0 {
		return errs[0]
	}
	errs = inParts(len(s.trainerOps), func(lo, hi int) []error {
		for _, op := range s.trainerOps[lo:hi] {
			for _, in := range op.Inputs {
				if gr := s.owner[in]; gr != nil && in != gr.param.Name {
					return []error{dsl.Errorf(op.Pos, "op %s reads %q, optimizer state of %s that lives on a pserver; trainer ops may read the parameter itself but not its optimizer's values", op.Type, in, gr.param.Name)}
				}
			}
		}
		return nil
	})
	if len(errs) > 0 {
		return errs[0]
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

// inParts runs f on the parts [lo, hi) of [0, n), one per core (a part
// for a short loop), and returns their results joined in order. f must
// only read what other parts use.
func inParts[T any](n int, f func(lo, hi int) []T) []T {
	parts := min(runtime.GOMAXPROCS(0), n/minPart)
	if parts <= 1 {
		return f(0, n)
	}
	out := make([][]T, parts)
	var wg sync.WaitGroup
	for i := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = f(i*n/parts, (i+1)*n/parts)
		}()
	}
	wg.Wait()
	return slices.Concat(out...)
}

// minPart is the shortest part inParts hands a core of its own.
const minPart = 4096

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
	for _, gr := range s.byName {
		n := gr.param.Name
		// merge takes a place other than "" and "pserver" (where nothing
		// is pinned); what names its holder, built only then.
		merge := func(place string, pos dsl.Pos, what string) error {
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
		pinned := func(place string) bool { return place != "" && place != "pserver" }
		if pinned(gr.param.Place) {
			if err := merge(gr.param.Place, gr.param.Pos, "param "+n); err != nil {
				return err
			}
		}
		for _, st := range gr.state {
			if pinned(st.Place) {
				if err := merge(st.Place, st.Pos, "state "+st.Name); err != nil {
					return err
				}
			}
		}
		for _, op := range gr.ops {
			if pinned(op.Place) {
				if err := merge(op.Place, op.Pos, "op "+op.Type+" (optimizer of "+n+")"); err != nil {
					return err
				}
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
	for _, gr := range s.byName {
		n := gr.param.Name
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
			gr.whole = strconv.Itoa(numel) + " elements <= min_block_size " + strconv.Itoa(s.opt.MinBlockSize)
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
	for _, gr := range s.byName {
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

// attr is one attribute of an op built by split.
type attr struct {
	k string
	v any
}

// newOp builds an op with every default attribute filled in, as Parse
// would, so the written file reads back into the same op: dsl.NewOp
// without the map of the given attributes.
func newOp(typ string, inputs, outputs []string, pos dsl.Pos, attrs ...attr) *dsl.Op {
	full := dsl.DefaultAttrs(typ, len(attrs))
	for _, a := range attrs {
		full[a.k] = a.v
	}
	return &dsl.Op{Type: typ, Inputs: inputs, Outputs: outputs, Attrs: full, Section: dsl.Backward, Pos: pos}
}

func dtypeAttr(d ir.DType) string {
	if d == ir.I32 {
		return "i32"
	}
	return "f32"
}

// slab hands out slices of one larger allocation: split copies hundreds
// of thousands of ops, variables and name lists.
type slab[T any] struct{ buf []T }

// take returns a new slice of n zero elements whose capacity is n.
func (a *slab[T]) take(n int) []T {
	if a.buf == nil || len(a.buf) < n {
		a.buf = make([]T, max(1024, n))
	}
	c := a.buf[:n:n]
	a.buf = a.buf[n:]
	return c
}

func (a *slab[T]) one() *T { return &a.take(1)[0] }

// clone is append([]T{}, s...) (never nil) in the slab.
func (a *slab[T]) clone(s []T) []T {
	c := a.take(len(s))
	copy(c, s)
	return c
}

// build fills the plan. The trainer's subgraph is built beside the
// pservers' subgraphs and the plan's description: each only reads the
// groups and blocks and writes its own graphs, and on a model of many
// thousand layers the two halves take about as long (docs/split.md,
// Cost). The clip-norm exchange joins both sides and describe lists its
// transfers, so with clip.norm they follow.
func (s *splitter) build() *Plan {
	p, blocks := s.newPlan()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.buildPServers(p, blocks)
		if s.clipNorm == 0 {
			s.describe(p, blocks)
		}
	}()
	s.buildTrainer(p.Trainer)
	<-done
	if s.clipNorm > 0 {
		s.buildClipNorm(p, blocks)
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
	g, opt := s.g, s.opt
	// Trainer variables: data, and every param or state not owned by a
	// group placed on a pserver.
	onTrainer := func(gr *group) bool { return gr == nil || gr.pin == trainerNode }
	t.Vars = make(map[string]*dsl.Var, len(g.Vars))
	t.Order = make([]string, 0, len(g.Vars))
	var vars slab[dsl.Var]
	for _, name := range s.sorted {
		v := g.Vars[name]
		if v.Kind == dsl.KindData || onTrainer(s.owner[name]) {
			c := vars.one()
			*c = *v
			c.Place = ""
			t.AddVar(c)
		}
	}
	trainerOps := s.trainerOps
	extra := 0 // the ops split adds to the trainer
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

	// Trainer ops in a canonical order, with recvs before the first reader
	// of a parameter and sends right after its gradient is computed.
	t.Ops = make([]*dsl.Op, 0, len(trainerOps)+extra)
	nin := 0
	for _, op := range trainerOps {
		nin += len(op.Inputs)
	}
	names := slab[string]{buf: make([]string, nin)}
	var copies slab[dsl.Op]
	var shapes slab[int]
	received := make(map[string]bool, len(s.names))
	for _, op := range canonicalOrder(trainerOps) {
		var inputs []string
		if op.Inputs != nil {
			inputs = names.take(len(op.Inputs))
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
				inputs[i] = FetchedName(in) // lookups read the rows the trainer fetched
			}
			if gr.pin == trainerNode || received[in] {
				continue
			}
			received[in] = true
			if gr.table {
				t.Ops = append(t.Ops, s.fetchOp(gr, trainerOps))
				continue
			}
			dt := dtypeAttr(gr.param.DType)
			for _, b := range gr.blocks {
				t.Ops = append(t.Ops, newOp("recv", nil, []string{b.name}, gr.param.Pos,
					attr{"var", b.name}, attr{"from", s.nodes[b.pserver]}, attr{"shape", shapes.clone(b.shape)}, attr{"dtype", dt}))
			}
			if len(gr.blocks) > 1 {
				parts := make([]string, len(gr.blocks))
				for j, b := range gr.blocks {
					parts[j] = b.name
				}
				t.Ops = append(t.Ops, newOp("concat", parts, []string{in}, gr.param.Pos, attr{"axis", 0}))
			}
		}
		c := copies.one()
		*c = *op
		c.Place = ""
		c.Inputs = inputs
		t.Ops = append(t.Ops, c)
		for _, out := range op.Outputs {
			pn, ok := strings.CutSuffix(out, "@GRAD")
			if !ok {
				continue // not a gradient
			}
			gr := s.groups[pn]
			if gr == nil || gr.pin == trainerNode || out != dsl.GradName(gr.param.Name) {
				continue
			}
			if gr.table {
				t.Ops = append(t.Ops, newOp("send_rows", []string{out}, nil, gr.param.Pos, attr{"var", out}, attr{"shards", opt.PServers}))
				continue
			}
			for _, b := range gr.blocks {
				if b.cut() {
					t.Ops = append(t.Ops, newOp("slice_rows", []string{out}, []string{b.grad}, gr.param.Pos, attr{"start", b.start}, attr{"end", b.end}, attr{"axis", 0}))
				}
				t.Ops = append(t.Ops, newOp("send", []string{b.grad}, nil, gr.param.Pos, attr{"var", b.grad}, attr{"to", s.nodes[b.pserver]}))
			}
		}
	}
	for _, op := range t.Ops {
		if op.Type == "recv" || op.Type == "concat" {
			op.Section = dsl.Forward
		}
	}
}

// buildPServers fills the pservers' subgraphs, one block after another in
// name order.
func (s *splitter) buildPServers(p *Plan, blocks []*block) {
	count := s.count
	nops := make([]int, len(p.PServers))
	nvars := make([]int, len(p.PServers))
	copied, nnames := 0, 0
	for _, b := range blocks {
		nops[b.pserver] += len(b.g.ops) + 2
		nvars[b.pserver] += 1 + len(b.g.state)
		copied += len(b.g.ops)
		for _, op := range b.g.ops {
			nnames += len(op.Inputs) + len(op.Outputs)
		}
	}
	for i, ps := range p.PServers {
		ps.Vars = make(map[string]*dsl.Var, nvars[i])
		ps.Order = make([]string, 0, nvars[i])
		ps.Ops = make([]*dsl.Op, 0, nops[i])
	}
	copies := slab[dsl.Op]{buf: make([]dsl.Op, copied)}
	names := slab[string]{buf: make([]string, nnames)}
	var vars slab[dsl.Var]
	var shapes slab[int]
	for _, b := range blocks {
		ps := p.PServers[b.pserver]
		gr := b.g
		pn := gr.param.Name
		ren := func(x string) string { return rename(pn, b.name, x) }
		rens := func(in []string) []string {
			if in == nil {
				return nil
			}
			out := names.take(len(in))
			for i, x := range in {
				out[i] = ren(x)
			}
			return out
		}
		sliced := func(v *dsl.Var) *dsl.Var {
			c := vars.one()
			*c = *v
			c.Name, c.Place, c.Pos = ren(v.Name), "", v.Pos
			if c.Of != "" {
				c.Of = ren(c.Of)
			}
			if (b.cut() || gr.table) && v.Shape.Equal(gr.param.Shape) {
				c.Shape = shapes.clone(b.shape)
				c.Block = &dsl.Block{Of: v.Name, Start: b.start, End: b.end, Stride: b.stride, Shape: shapes.clone(v.Shape), Pos: v.Pos}
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
				attr{"var", gr.grad}, attr{"count", count}, attr{"shape", shapes.clone(b.shape)}, attr{"max_rows", gr.maxRows})
			for _, op := range []*dsl.Op{serve, acc} {
				op.Section, op.Param = dsl.Optimize, b.name
			}
			ps.Ops = append(ps.Ops, serve, acc)
		} else {
			acc := newOp("accumulate", nil, []string{grad}, gr.param.Pos,
				attr{"var", grad}, attr{"count", count}, attr{"shape", shapes.clone(b.shape)}, attr{"dtype", dtypeAttr(gr.param.DType)})
			acc.Section, acc.Param = dsl.Optimize, b.name
			ps.Ops = append(ps.Ops, acc)
		}
		for _, op := range gr.ops { // template order: the same for every parameter
			c := copies.one()
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
	op := newOp("fetch_rows", ids, []string{FetchedName(gr.param.Name)}, gr.param.Pos,
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

// Ready ops are ordered canonically by a key: forward before backward,
// then by first output, so the order never depends on the order ops were
// declared in. The key is string(rune('0'+op.Section)) followed by the
// first output, or for an op without outputs "\xff", the type, "|" and the
// inputs joined by ",". The two parts are compared one after the other,
// which orders as the concatenation does (UTF-8 is prefix-free).
var sectionKeys = func() (k [256]string) {
	for i := range k {
		k[i] = string(rune('0' + dsl.Section(i)))
	}
	return k
}()

func opKeyRest(op *dsl.Op) string {
	if len(op.Outputs) > 0 {
		return op.Outputs[0]
	}
	return "\xff" + op.Type + "|" + strings.Join(op.Inputs, ",")
}

// opHeap is container/heap's algorithm over op indices, without the
// interface calls.
type opHeap struct {
	sec  []string
	rest []string
	idx  []int32
}

func (h *opHeap) less(i, j int) bool {
	a, b := h.idx[i], h.idx[j]
	if h.sec[a] != h.sec[b] {
		return h.sec[a] < h.sec[b]
	}
	return h.rest[a] < h.rest[b]
}

func (h *opHeap) init() {
	n := len(h.idx)
	for i := n/2 - 1; i >= 0; i-- {
		h.down(i, n)
	}
}

func (h *opHeap) push(x int32) {
	h.idx = append(h.idx, x)
	h.up(len(h.idx) - 1)
}

func (h *opHeap) pop() int32 {
	n := len(h.idx) - 1
	h.idx[0], h.idx[n] = h.idx[n], h.idx[0]
	h.down(0, n)
	x := h.idx[n]
	h.idx = h.idx[:n]
	return x
}

func (h *opHeap) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || !h.less(j, i) {
			break
		}
		h.idx[i], h.idx[j] = h.idx[j], h.idx[i]
		j = i
	}
}

func (h *opHeap) down(i0, n int) {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2 // = 2*i + 2  // right child
		}
		if !h.less(j, i) {
			break
		}
		h.idx[i], h.idx[j] = h.idx[j], h.idx[i]
		i = j
	}
}

// canonicalOrder sorts ops topologically, ready ops by their key.
func canonicalOrder(list []*dsl.Op) []*dsl.Op {
	prod := make(map[string]int32, len(list))
	for i, op := range list {
		for _, o := range op.Outputs {
			prod[o] = int32(i)
		}
	}
	// users[start[j]:start[j+1]] are the ops reading op j's outputs, in
	// op order (once per input).
	indeg := make([]int32, len(list))
	start := make([]int32, len(list)+1)
	var edges []int32 // the producer of each input read, in op order
	for i, op := range list {
		for _, in := range op.Inputs {
			if j, ok := prod[in]; ok {
				indeg[i]++
				start[j+1]++
				edges = append(edges, j)
			}
		}
	}
	for j := range list {
		start[j+1] += start[j]
	}
	users := make([]int32, len(edges))
	next := slices.Clone(start[:len(list)])
	k := 0
	for i := range list {
		for range indeg[i] {
			j := edges[k]
			k++
			users[next[j]] = int32(i)
			next[j]++
		}
	}
	h := &opHeap{sec: make([]string, len(list)), rest: make([]string, len(list))}
	for i, op := range list {
		h.sec[i], h.rest[i] = sectionKeys[op.Section], opKeyRest(op)
		if indeg[i] == 0 {
			h.idx = append(h.idx, int32(i))
		}
	}
	h.init()
	out := make([]*dsl.Op, 0, len(list))
	for len(h.idx) > 0 {
		i := h.pop()
		out = append(out, list[i])
		for _, u := range users[start[i]:start[i+1]] {
			if indeg[u]--; indeg[u] == 0 {
				h.push(u)
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
		part := "clip@part." + strconv.Itoa(j)
		factor := "clip@factor." + strconv.Itoa(j)
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
		if !slices.Contains(parts, "clip@part."+strconv.Itoa(j)) {
			continue
		}
		t.Ops = append(t.Ops, newOp("send", []string{dsl.ClipFactor}, nil, pos, attr{"var", "clip@factor." + strconv.Itoa(j)}, attr{"to", pserverNode(j)}))
	}
}
