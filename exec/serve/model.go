package serve

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
)

// Params is one version of a model's parameters, what a request computes
// with: the dense parameters, fixed tables and model state (Tensors), the
// dynamic tables, the normalization statistics of the training data, and
// the version a response names: the training step served (VersionStep:
// a followed job's, or the step a model file records), or for a file
// that records none the count of its loads (VersionLoads).
type Params struct {
	Version   int64
	VersionIs string
	Tensors   program.Scope
	Tables    map[string]*dyntable.Table
	Norm      *data.Scaling
}

// Bytes is the memory the parameters hold: their tensors' and their
// dynamic tables'.
func (p Params) Bytes() int64 {
	var n int64
	for _, t := range p.Tensors {
		n += int64(len(t.Bytes()))
	}
	for _, t := range p.Tables {
		n += t.Stats().Bytes.Total()
	}
	return n
}

// What a version counts (Params.VersionIs; the model metadata's
// parameters.version_is).
const (
	VersionStep  = "training_step"
	VersionLoads = "load_count"
)

// LoadParams reads a model file (`--save` of run or train) into Params:
// modelfile.ReadModel's tensors and statistics, each dynamic table read
// into a lookup-only table once (program.ReadTable), which every program
// of the version shares; the version is the training step the file
// records (VersionStep), or -1 when it records none (the caller numbers
// it, VersionLoads).
func LoadParams(g *dsl.Graph, file string, log zerolog.Logger) (Params, error) {
	mf, err := modelfile.ReadModel(g, file, log)
	if err != nil {
		return Params{}, err
	}
	tensors, norm := mf.Tensors, mf.Norm
	_, lowered, err := dsl.LowerDynamic(g)
	if err != nil {
		return Params{}, err
	}
	p := Params{Version: -1, VersionIs: VersionLoads, Tensors: tensors, Norm: norm}
	if mf.HasStep {
		p.Version, p.VersionIs = mf.Step, VersionStep
	}
	for _, dt := range lowered {
		keys := dyntable.KeysName(dt.Name)
		t, err := program.ReadTable(dt, tensors[keys], tensors[dt.Name], file)
		if err != nil {
			return Params{}, err
		}
		if p.Tables == nil {
			p.Tables = map[string]*dyntable.Table{}
		}
		p.Tables[dt.Name] = t
		delete(tensors, keys)
		delete(tensors, dt.Name)
	}
	return p, nil
}

// Model is a model as the server runs it: its graph and data spec, its
// inputs and outputs (Meta), and the current version of its parameters.
// Swap replaces the version atomically: a request computes with the one
// version it acquired, and a version's programs are closed once the last
// request using it is done.
type Model struct {
	g        *dsl.Graph
	meta     Meta
	defaults []evaluate.Output
	maxBatch int
	cur      atomic.Pointer[version]

	outsMu sync.Mutex
	outs   map[string][]evaluate.Output // resolved output lists, by their names joined

	// Following a job (Apply): rows is held for reading around a
	// program's reads of table rows (program.Runtime.Tables: its
	// lookup_table, embedding_bag and dyn_pull) and for writing while an
	// update writes a few hundred table rows, so a row is never read
	// half-written and neither side waits on the other for long; spare is the version before the current
	// one, whose dense tensors the next update writes once no request
	// uses it (a shadow copy); tables names the fixed tables, whose
	// tensors every version shares.
	rows     sync.RWMutex
	rowsWait atomic.Int64 // nanoseconds requests waited for rows (RowsWait)
	applyMu  sync.Mutex
	spare    *version
	tables   map[string]bool
}

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

// DefaultMaxBatch is the most rows one program computes at once; a
// request of more rows is computed in chunks of it.
const DefaultMaxBatch = evaluate.EvalChunk

// NewModel makes the model g (with its data and train sections) serving
// p, computing requests in chunks of at most maxBatch rows (0:
// DefaultMaxBatch).
func NewModel(g *dsl.Graph, p Params, maxBatch int) (*Model, error) {
	if g.Train == nil || g.Data == nil {
		return nil, dsl.Errorf(dsl.Pos{File: g.File}, "serve needs the model's data section (its columns) and train section (its loss names the output)")
	}
	if maxBatch <= 0 {
		maxBatch = DefaultMaxBatch
	}
	m := &Model{g: g, maxBatch: maxBatch, outs: map[string][]evaluate.Output{}, tables: fixedTables(g)}
	var err error
	if m.defaults, err = evaluate.PredictOutputs(g, nil, maxBatch, "output"); err != nil {
		return nil, err
	}
	m.meta = metaOf(g, m.defaults)
	if _, err := data.NewLineParser(g.Data, p.Norm); err != nil {
		return nil, err
	}
	m.Swap(p)
	return m, nil
}

// metaOf lists the model's inputs (the rows, then each features and ids
// spec, in data order) and default outputs.
func metaOf(g *dsl.Graph, outs []evaluate.Output) Meta {
	name := g.Name
	if name == "" {
		name = strings.TrimSuffix(g.File, ".yaml")
	}
	m := Meta{Name: name, Inputs: []TensorMeta{{Name: RowsInput, Datatype: dtBytes, Shape: []int64{-1}, Kind: KindRows}}}
	for _, c := range g.Data.Features {
		m.Inputs = append(m.Inputs, TensorMeta{Name: c.Name, Datatype: dtFP32, Shape: []int64{-1, int64(c.Width())}, Kind: KindFeatures})
	}
	for _, c := range g.Data.IDs {
		t := TensorMeta{Name: c.Name, Datatype: dtInt32, Shape: []int64{-1, int64(c.Width())}, Kind: KindIDs, Bound: int64(c.IDBound()), Pad: c.Separator != 0}
		if c.KeyType != "" {
			t.Datatype, t.Kind, t.Bound = dtInt64, KindKeys, 0
		}
		m.Inputs = append(m.Inputs, t)
	}
	for _, o := range outs {
		m.Outputs = append(m.Outputs, TensorMeta{Name: o.Name, Datatype: datatypeOf(o.DType()), Shape: outShape(-1, o)})
	}
	return m
}

func datatypeOf(dt tensor.DType) string {
	switch dt {
	case tensor.I32:
		return dtInt32
	case tensor.I64:
		return dtInt64
	}
	return dtFP32
}

// outShape is an output's shape for n rows: [n], or [n, values] for
// several values a row.
func outShape(n int64, o evaluate.Output) []int64 {
	if o.Values() == 1 {
		return []int64{n}
	}
	return []int64{n, int64(o.Values())}
}

// Meta is the model's inputs and default outputs.
func (m *Model) Meta() *Meta { return &m.meta }

// Ready says whether the model has parameters to serve.
func (m *Model) Ready() bool { return m.cur.Load() != nil }

// Version is the version served now.
func (m *Model) Version() int64 { return m.cur.Load().Version }

// VersionIs says what Version counts (VersionStep, VersionLoads).
func (m *Model) VersionIs() string { return m.cur.Load().VersionIs }

// Swap makes p the version requests compute with from now on; requests
// already computing with the previous one finish with it.
//
// The new version is given, before it is swapped in, the programs the
// requests on the current one use (warm), so no request waits for a
// program to be compiled (~10 ms for examples/ctr.yaml, whose requests
// take ~1 ms; TestNewVersionsAreWarm).
func (m *Model) Swap(p Params) {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	m.spare = nil // an update's shadow is made anew from p
	v := newVersion(p)
	if cur := m.cur.Load(); cur != nil {
		m.warm(v, cur)
	}
	if old := m.cur.Swap(v); old != nil {
		old.retired.Store(true)
		if old.refs.Load() == 0 {
			old.close()
		}
	}
}

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

// Result is a request's outputs and the version they were computed with.
type Result struct {
	ID      string
	Version int64
	Outputs []OutTensor
}

// OutTensor is one output tensor, row-major: Ints for an integer
// datatype (pred and integer variables), Floats for FP32 (the other
// slice is left as a previous request's output had it).
type OutTensor struct {
	Name     string
	Datatype string
	Shape    []int64
	Ints     []int64
	Floats   []float32
}

// outputs resolves the outputs a request names (nil: the defaults).
func (m *Model) outputs(names []string) ([]evaluate.Output, string, error) {
	if len(names) == 0 {
		return m.defaults, "", nil
	}
	key := strings.Join(names, ",")
	m.outsMu.Lock()
	outs, ok := m.outs[key]
	m.outsMu.Unlock()
	if ok {
		return outs, key, nil
	}
	outs, err := evaluate.PredictOutputs(m.g, names, m.maxBatch, "output")
	if err != nil {
		return nil, "", badRequest("%v", err)
	}
	m.outsMu.Lock()
	if len(m.outs) < maxOutLists {
		m.outs[key] = outs
	}
	m.outsMu.Unlock()
	return outs, key, nil
}

// Infer computes a request's outputs with the current version into res
// (its slices reused: a server's requests allocate no outputs), in
// chunks of at most maxBatch rows.
func (m *Model) Infer(ctx context.Context, req *Request, res *Result) error {
	outs, outsKey, err := m.outputs(req.Outputs)
	if err != nil {
		return err
	}
	res.ID = req.ID
	res.Outputs = resize(res.Outputs, len(outs))
	for i, o := range outs {
		t := &res.Outputs[i]
		t.Name, t.Datatype = o.Name, datatypeOf(o.DType())
		t.Shape = append(t.Shape[:0], int64(req.Rows))
		if o.Values() != 1 {
			t.Shape = append(t.Shape, int64(o.Values()))
		}
		if o.Ints() {
			t.Ints = resize(t.Ints, req.Rows*o.Values())
		} else {
			t.Floats = resize(t.Floats, req.Rows*o.Values())
		}
	}
	v := m.acquire()
	defer v.release()
	res.Version = v.Version
	for off := 0; off < req.Rows; off += m.maxBatch {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(m.maxBatch, req.Rows-off)
		w, err := v.get(m, poolKey{rows: n, outs: outsKey}, outs)
		if err != nil {
			return err
		}
		err = m.chunk(ctx, w, req, off, n, outs, res)
		v.put(w)
		if err != nil {
			return err
		}
	}
	return nil
}

// resize is s with n elements, its array reused when it holds them (the
// elements are then left as they were: the caller writes each).
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// chunk computes rows [off, off+n) of req with w.
func (m *Model) chunk(ctx context.Context, w *worker, req *Request, off, n int, outs []evaluate.Output, res *Result) error {
	if err := m.fill(w, req, off, n); err != nil {
		return err
	}
	w.rt.Ctx = ctx
	err := w.prog.Run(&w.rt)
	if err != nil {
		// kernels fail only on their data (an id outside its table)
		return badRequest("rows %d to %d: %v", off, off+n-1, err)
	}
	for i, o := range outs {
		t, vals, out := w.prog.Scope[o.Var], o.Values(), &res.Outputs[i]
		for r := 0; r < n; r++ {
			at := (off + r) * vals
			if o.Ints() {
				o.IntRow(t, r, out.Ints[at:at+vals])
			} else {
				o.FloatRow(t, r, out.Floats[at:at+vals])
			}
		}
	}
	return nil
}

// fill writes rows [off, off+n) of req into w's data tensors.
func (m *Model) fill(w *worker, req *Request, off, n int) error {
	dst := w.feed.Dst
	if req.Lines != nil {
		for r := 0; r < n; r++ {
			if err := w.lp.Parse(req.Lines[off+r], off+r, dst, r); err != nil {
				return badRequest("input %q: %v", RowsInput, err)
			}
		}
		return nil
	}
	for j, t := range m.meta.Inputs[1:] {
		d := dst[j]
		if d == nil { // the outputs do not read it
			continue
		}
		wd := int(t.width())
		src := req.Typed[j]
		switch t.Kind {
		case KindFeatures:
			for r := 0; r < n; r++ {
				row := off + r
				if err := w.lp.Features(j, row, src.Floats[row*wd:(row+1)*wd], d.F[r*wd:(r+1)*wd]); err != nil {
					return badRequest("input %q: %v", t.Name, err)
				}
			}
		case KindIDs:
			for k, v := range src.Ints[off*wd : (off+n)*wd] {
				d.I[k] = int32(v)
			}
		case KindKeys:
			copy(d.L, src.Ints[off*wd:(off+n)*wd])
		}
	}
	return nil
}

// rowsReader is Model.rows held for reading around a program's reads of
// table rows (program.Runtime.Tables), timing the waits (RowsWait).
type rowsReader Model

func (r *rowsReader) Lock() {
	if r.rows.TryRLock() {
		return
	}
	t := time.Now()
	r.rows.RLock()
	r.rowsWait.Add(int64(time.Since(t)))
}

func (r *rowsReader) Unlock() { r.rows.RUnlock() }

// RowsWait is the seconds requests have waited, in all, for updates
// writing table rows (Apply) before they could compute.
func (m *Model) RowsWait() float64 { return float64(m.rowsWait.Load()) / 1e9 }

// String names the model and its version, for logs.
func (m *Model) String() string { return fmt.Sprintf("%s version %d", m.meta.Name, m.Version()) }

// Update is what a followed job's pservers applied since the update
// before: the training step it brings the model to, new values of dense
// parameters, the changed rows of fixed and dynamic tables, and the
// state of the dynamic tables' shards.
type Update struct {
	Step   int64
	Dense  []DenseValues
	Rows   []TableRows
	Shards []ShardState
}

// ShardState is a pserver's shard of a dynamic table: its eviction
// watermark (its rows scored at or under it are dead), and Whole when
// the update holds every row of the shard (a pserver's full state: the
// rows the model held of the shard before are forgotten first).
type ShardState struct {
	Name          string
	Shard, Shards int
	Watermark     int64
	Whole         bool
}

// DenseValues are new values of a dense parameter from element Offset
// (a pserver holds a block of it).
type DenseValues struct {
	Name   string
	Offset int
	Values []float32
}

// TableRows are changed rows of a table: of a fixed table by row id
// (IDs), of a dynamic table by key (Keys, each with its Meta: what its
// eviction scores, dyntable's mirror.go); Values holds the rows one after
// another.
type TableRows struct {
	Name   string
	IDs    []int64
	Keys   []int64
	Meta   []uint64
	Values []float32
}

// Apply brings the model to u.Step without failing or blocking a request
// for long: the dense parameters are written into a shadow version (the
// one before the current, once no request uses it, its values first made
// the current one's), given the programs the current one's requests use
// (warm), and swapped in whole, so a request computes with one version of
// them; table rows are written in place, rowsPerHold at a time between
// two reads of table rows by programs (Model.rows), so a row is never
// read half-written and a request may see rows newer than its dense
// version, never older; the rows of a shard sent whole are replaced in
// one hold (no request sees the shard missing).
func (m *Model) Apply(u Update) error {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	cur := m.cur.Load()
	if err := m.checkUpdate(cur, u); err != nil {
		return err
	}
	shadow := m.spare
	if shadow == nil {
		shadow = m.shadowOf(cur)
	} else {
		for shadow.refs.Load() > 0 { // the requests still on it are short
			time.Sleep(50 * time.Microsecond)
		}
		for name, t := range cur.Tensors {
			if !m.tables[name] {
				copy(shadow.Tensors[name].F, t.F)
			}
		}
	}
	for _, d := range u.Dense {
		copy(shadow.Tensors[d.Name].F[d.Offset:], d.Values)
	}
	m.warm(shadow, cur) // the programs cur's requests use, ready before it is
	whole := false
	for _, sh := range u.Shards {
		whole = whole || sh.Whole
	}
	if whole { // a shard replaced: dropped and written again in one hold, so no request sees it missing
		m.rows.Lock()
		defer m.rows.Unlock()
		for _, sh := range u.Shards {
			if sh.Whole {
				if err := cur.Tables[sh.Name].DropShard(sh.Shard); err != nil {
					return fmt.Errorf("update of step %d: dynamic table %s: %w", u.Step, sh.Name, err)
				}
			}
		}
	}
	for _, r := range u.Rows {
		if err := m.writeRows(cur, r, !whole); err != nil {
			return fmt.Errorf("update of step %d: %w", u.Step, err)
		}
	}
	if !whole && len(u.Shards) > 0 {
		m.rows.Lock()
		defer m.rows.Unlock()
	}
	for _, sh := range u.Shards {
		if err := cur.Tables[sh.Name].Expire(sh.Shard, sh.Watermark); err != nil {
			return fmt.Errorf("update of step %d: dynamic table %s: %w", u.Step, sh.Name, err)
		}
	}
	shadow.Version = u.Step
	m.cur.Store(shadow)
	m.spare = cur
	return nil
}

// rowsPerHold is the table rows an update writes per hold of Model.rows
// (64 KiB of a 16-wide table's rows: a few microseconds), so a request's
// table reads wait at most that long for an update.
const rowsPerHold = 1024

// writeRows writes table rows r of an update, held (the caller holds
// Model.rows) or a few hundred rows a hold of it (rowsPerHold).
func (m *Model) writeRows(cur *version, r TableRows, chunked bool) error {
	n, per := len(r.IDs), rowsPerHold
	dyn := cur.Tables[r.Name]
	if dyn != nil {
		n = len(r.Keys)
	}
	if !chunked {
		per = max(n, 1)
	}
	for lo := 0; lo < n; lo += per {
		hi := min(n, lo+per)
		if chunked {
			m.rows.Lock()
		}
		var err error
		if dyn != nil {
			w := dyn.Config().Dim
			err = dyn.MirrorRows(&dyntable.Batch{Keys: r.Keys[lo:hi], Meta: r.Meta[lo:hi], Values: r.Values[lo*w : hi*w]})
		} else {
			t := cur.Tensors[r.Name]
			w := t.Shape[1]
			for i, id := range r.IDs[lo:hi] {
				copy(t.F[int(id)*w:int(id+1)*w], r.Values[(lo+i)*w:(lo+i+1)*w])
			}
		}
		if chunked {
			m.rows.Unlock()
		}
		if err != nil {
			return fmt.Errorf("dynamic table %s: %w", r.Name, err)
		}
	}
	return nil
}

// checkUpdate refuses an update that does not fit the model: it would
// write outside a tensor.
func (m *Model) checkUpdate(cur *version, u Update) error {
	for _, d := range u.Dense {
		t, ok := cur.Tensors[d.Name]
		if !ok || m.tables[d.Name] || t.DType != tensor.F32 || d.Offset < 0 || d.Offset+len(d.Values) > len(t.F) {
			return fmt.Errorf("update of step %d: %d values of dense parameter %q from %d do not fit the model", u.Step, len(d.Values), d.Name, d.Offset)
		}
	}
	for _, sh := range u.Shards {
		t, ok := cur.Tables[sh.Name]
		if !ok {
			return fmt.Errorf("update of step %d: the model has no dynamic table %q", u.Step, sh.Name)
		}
		if n := t.MirrorShards(); n != sh.Shards || sh.Shard < 0 || sh.Shard >= sh.Shards {
			return fmt.Errorf("update of step %d: shard %d of %d of dynamic table %q does not fit the model, which follows it over %d pservers", u.Step, sh.Shard, sh.Shards, sh.Name, n)
		}
	}
	for _, r := range u.Rows {
		if t, ok := cur.Tables[r.Name]; ok {
			if r.IDs != nil || len(r.Meta) != len(r.Keys) || len(r.Values) != len(r.Keys)*t.Config().Dim {
				return fmt.Errorf("update of step %d: %d keys of dynamic table %q do not fit the model", u.Step, len(r.Keys), r.Name)
			}
			continue
		}
		t, ok := cur.Tensors[r.Name]
		if !ok || !m.tables[r.Name] || r.Keys != nil || len(r.Values) != len(r.IDs)*t.Shape[1] {
			return fmt.Errorf("update of step %d: %d rows of table %q do not fit the model", u.Step, len(r.IDs), r.Name)
		}
		for _, id := range r.IDs {
			if id < 0 || int(id) >= t.Shape[0] {
				return fmt.Errorf("update of step %d: row %d of table %q is outside its %d rows", u.Step, id, r.Name, t.Shape[0])
			}
		}
	}
	return nil
}

// shadowOf is a second version beside cur: its own copies of the dense
// parameters, the same tables.
func (m *Model) shadowOf(cur *version) *version {
	ts := program.Scope{}
	for name, t := range cur.Tensors {
		if m.tables[name] {
			ts[name] = t
			continue
		}
		c := tensor.New(t.DType, t.Shape)
		copy(c.F, t.F)
		copy(c.I, t.I)
		copy(c.L, t.L)
		ts[name] = c
	}
	p := cur.Params
	p.Tensors = ts
	return newVersion(p)
}

// fixedTables names the parameters that ops read rows of (lookup_table,
// embedding_bag): their tensors are written in place by updates, shared
// by every version.
func fixedTables(g *dsl.Graph) map[string]bool {
	out := map[string]bool{}
	for _, op := range g.Ops {
		if ops.ReadsTable(op.Type) && len(op.Inputs) > 0 {
			out[op.Inputs[0]] = true
		}
	}
	return out
}
