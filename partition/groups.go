package partition

import (
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
)

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
	// The sorted variable names are needed below and by build; sort them
	// while the ops are grouped.
	sorted := make(chan []string, 1)
	go func() { sorted <- sortedVarNames(s.g) }()
	nOpt, err := s.groupOptimizerOps()
	if err != nil {
		<-sorted
		return err
	}
	if err := s.groupStates(sorted); err != nil {
		return err
	}
	if err := s.groupAssigns(); err != nil {
		return err
	}
	s.trainerOps = make([]*dsl.Op, 0, len(s.g.Ops)-nOpt)
	for _, op := range s.g.Ops {
		if op.Section != dsl.Optimize && !(s.clipNorm > 0 && isClipNormOp(op)) {
			s.trainerOps = append(s.trainerOps, op)
		}
	}
	return nil
}

// groupOptimizerOps makes a group of each parameter's optimizer ops (an
// optimizer's ops come one parameter after another) and lists the groups
// in name order; it returns the count of optimizer ops.
func (s *splitter) groupOptimizerOps() (int, error) {
	g := s.g
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
	var last *group
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
		return 0, errs
	}
	if len(s.groups) == 0 {
		return 0, dsl.Errorf(g.Train.Pos, "the model has no optimizer ops, so nothing would run on the pservers; add train.optimizer")
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
	return nOpt, nil
}

// groupStates gives each state variable to its group: the parameter named
// by `of`, or the group whose ops read it (none: trainer-side state). The
// lookups run in parts (they only read); what they find is taken in name
// order.
func (s *splitter) groupStates(sorted <-chan []string) error {
	g := s.g
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
	s.sorted = <-sorted
	readers := map[string]*group{}
	for _, r := range reads {
		if other := readers[r.state]; other != nil && other != r.gr {
			return dsl.Errorf(r.op.Pos, "state %q is read by the optimizers of both %s and %s; each optimizer state belongs to one parameter", r.state, other.param.Name, r.gr.param.Name)
		}
		readers[r.state] = r.gr
	}
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
	return nil
}

// groupAssigns gives each assign to the group that computes its target
// (the others run on the trainer), and checks that every group assigns its
// parameter a new value.
func (s *splitter) groupAssigns() error {
	g := s.g
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
				if p, ok := strings.CutSuffix(o, ops.GradSuffix); ok {
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
			return dsl.Errorf(gr.pinPos, "%s has place: %s, but %s is a lookup table (read only through lookup_table or embedding_bag), which split shards by row id across every pserver; remove place", gr.pinBy, gr.pin, n)
		}
		if gr.pin == trainerNode && s.opt.Trainers > 1 {
			return dsl.Errorf(gr.pinPos, "%s has place: trainer, but with %d trainers every replica would update its own copy of %s and the replicas would drift apart; remove place (or split for one trainer)", gr.pinBy, s.opt.Trainers, n)
		}
	}
	return nil
}
