package serve

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
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
	// Not advised for huge pages (program.Init's are): a served file is
	// loaded again on every hot swap, into memory the heap may take from
	// an advised earlier version, and on this project's 2-core VM the
	// fresh huge pages' faults gave the requests during reloads every
	// 0.5 s a p99 of 13.0 ms (median of 17 runs; 7 above 16 ms) against
	// 9.75 ms without (10 runs, none above 12); khugepaged would have
	// merged the pages only after minutes. docs/serving.md.
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
	// running counts the requests being computed now (Infer: their rows
	// parsed, their programs run, their outputs read): with one on every
	// core, their kernels run serial (serialKernels).
	running atomic.Int32
	applyMu sync.Mutex
	spare   *version
	tables  map[string]bool
}

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
	if d := g.Data.Delimiter; splits(d) {
		m.delim = d
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
	m.running.Add(1)
	defer m.running.Add(-1)
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
	w.rt.SerialKernels = serialKernels(int(m.running.Load()))
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

// serialKernels says whether a program keeps its kernels on its own
// goroutine, given the requests being computed now (its own included): it
// does when they are one a core or more. The top layer of a 100-row
// request of examples/ctr.yaml (5.5 M multiply-adds) otherwise offers its
// column blocks to blas's helper goroutine; a block the helper took while
// its thread then lost the core makes the request wait for it (up to 30
// ms, 1 to 3 requests in 3,000 with 4 clients on 2 loaded cores), and the
// hand-offs cost CPU besides. A request alone keeps the helpers, and the
// idle cores with them.
func serialKernels(running int) bool {
	return running >= runtime.GOMAXPROCS(0)
}

// fill writes rows [off, off+n) of req into w's data tensors.
func (m *Model) fill(w *worker, req *Request, off, n int) error {
	dst := w.feed.Dst
	if sp := req.Split; sp != nil {
		for r := 0; r < n; r++ {
			row := off + r
			var err error
			if raw := sp.Raw(row); raw != nil { // one field: the line itself
				err = w.lp.Parse(raw, row, dst, r)
			} else {
				w.fields = sp.Fields(row, w.fields[:0])
				err = w.lp.ParseFields(w.fields, row, dst, r)
			}
			if err != nil {
				return badRequest("input %q: %v", RowsInput, err)
			}
		}
		return nil
	}
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

// String names the model and its version, for logs.
func (m *Model) String() string { return fmt.Sprintf("%s version %d", m.meta.Name, m.Version()) }
