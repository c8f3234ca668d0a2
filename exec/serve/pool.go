package serve

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/program"
)

// version is one version of the parameters and the programs compiled
// against them, pooled by batch size and outputs.
type version struct {
	Params
	refs    atomic.Int64
	retired atomic.Bool
	closing sync.Once
	mu      sync.Mutex
	free    map[poolKey][]*worker
	// made counts the programs of each key the version holds (idle or
	// running): what its requests needed at once, which warm compiles
	// for the version after it.
	made map[poolKey]made
}

// made is the programs made for a key, and the outputs they compute.
type made struct {
	n    int
	outs []evaluate.Output
}

func newVersion(p Params) *version {
	return &version{Params: p, free: map[poolKey][]*worker{}, made: map[poolKey]made{}}
}

type poolKey struct {
	rows int
	outs string
}

// worker is a program compiled for one batch size and one list of
// outputs, with what fills it: a request's rows are parsed straight into
// its data tensors.
type worker struct {
	key  poolKey
	prog *program.Program
	feed *program.Feeder
	lp   *data.LineParser
	rt   program.Runtime
	// fields is room for a row's fields (Request.Split)
	fields [][]byte
}

// Pool bounds: the batch sizes and output lists a version keeps programs
// for, the idle programs of each, and the programs warm compiles for a
// new version.
const (
	maxPoolKeys = 32
	maxIdle     = 16
	maxOutLists = 64
	maxWarm     = 32
)

// acquire is the current version, held until release.
func (m *Model) acquire() *version {
	for {
		v := m.cur.Load()
		v.refs.Add(1)
		if m.cur.Load() == v {
			return v
		}
		v.release() // swapped meanwhile: take the new one
	}
}

func (v *version) release() {
	if v.refs.Add(-1) == 0 && v.retired.Load() {
		v.close()
	}
}

// close closes the version's idle programs (a retired version has no
// others).
func (v *version) close() {
	v.closing.Do(func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		for k, ws := range v.free {
			for _, w := range ws {
				w.prog.Close()
			}
			delete(v.free, k)
		}
	})
}

// get is an idle program for key, or a new one.
func (v *version) get(m *Model, key poolKey, outs []evaluate.Output) (*worker, error) {
	v.mu.Lock()
	if ws := v.free[key]; len(ws) > 0 {
		w := ws[len(ws)-1]
		v.free[key] = ws[:len(ws)-1]
		v.mu.Unlock()
		return w, nil
	}
	v.mu.Unlock()
	return v.compile(m, key, outs)
}

// warm compiles for v the programs from holds that v lacks (as many of
// each key, at most maxWarm in all), idle for v's first requests.
func (m *Model) warm(v, from *version) {
	from.mu.Lock()
	want := maps.Clone(from.made)
	from.mu.Unlock()
	budget := maxWarm
	for key, mk := range want {
		v.mu.Lock()
		have := v.made[key].n
		v.mu.Unlock()
		for ; have < mk.n && budget > 0; have, budget = have+1, budget-1 {
			w, err := v.compile(m, key, mk.outs)
			if err != nil {
				return // a request compiling it will say why
			}
			v.put(w)
		}
	}
}

// compile makes a new program for key.
func (v *version) compile(m *Model, key poolKey, outs []evaluate.Output) (*worker, error) {
	targets := make([]string, len(outs))
	for i, o := range outs {
		targets[i] = o.Var
	}
	p, err := program.Compile(m.g, program.CompileOptions{Batch: key.rows, Targets: targets, Shared: v.Tensors, Tables: v.Tables, Workers: 1})
	if err != nil {
		return nil, err
	}
	lp, err := data.NewLineParser(m.g.Data, v.Norm)
	if err != nil {
		p.Close()
		return nil, err
	}
	v.mu.Lock()
	if mk, known := v.made[key]; known || len(v.made) < maxPoolKeys {
		v.made[key] = made{n: mk.n + 1, outs: outs}
	}
	v.mu.Unlock()
	return &worker{key: key, prog: p, feed: program.FeederOf(lp.Spec(), p.Scope), lp: lp, rt: program.Runtime{Tables: (*rowsReader)(m)}}, nil
}

// put makes w idle again, or closes it: the version is retired, or keeps
// enough programs.
func (v *version) put(w *worker) {
	v.mu.Lock()
	defer v.mu.Unlock()
	ws, known := v.free[w.key]
	if v.retired.Load() && v.refs.Load() <= 1 || len(ws) >= maxIdle {
		w.prog.Close()
		v.unmade(w.key, 1)
		return
	}
	if !known && len(v.free) >= maxPoolKeys {
		for k, old := range v.free { // make room: drop another size's programs
			for _, o := range old {
				o.prog.Close()
			}
			v.unmade(k, len(old))
			delete(v.free, k)
			break
		}
	}
	v.free[w.key] = append(ws, w)
}

// unmade counts n programs of key closed (v.mu held).
func (v *version) unmade(key poolKey, n int) {
	mk, ok := v.made[key]
	switch {
	case !ok:
	case mk.n <= n:
		delete(v.made, key)
	default:
		mk.n -= n
		v.made[key] = mk
	}
}
