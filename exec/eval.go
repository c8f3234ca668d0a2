package exec

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/tensor"
)

// evaluator computes a model's loss and metrics over one data set with
// the parameters it shares. Its programs are compiled once, so evaluating
// every N steps of a run allocates nothing after setup.
//
// An in-memory set is evaluated in one batch of all its rows, so every
// metric (AUC too) is its value over the set. A streamed file is
// evaluated in chunks: each value is the row-weighted mean over the
// chunks, which is its value over the file for means over rows (mean,
// softmax_cross_entropy, accuracy, sigmoid_cross_entropy, mse).
type evaluator struct {
	targets     []string
	set         *data.Set
	file        *data.FileStream
	rows        int      // of the last run
	size, lastN int      // the rows of a chunk (full's batch), of the last chunk (last's)
	full, last  *Program // last: the file's shorter last chunk (nil: none yet)
	ffull, flst *feeder
	compile     func(batch int) (*Program, *feeder, error)
	sums        []float64
	// Made once, so that a run allocates nothing.
	ordered *data.Stream
	rt      *NodeRuntime
	onChunk func(n int) error
}

func newEvaluator(g *dsl.Graph, set *data.Set, file *data.FileStream, params Scope, chunk int) (*evaluator, error) {
	e := &evaluator{targets: append([]string{g.Train.Loss}, g.Train.Metrics...), set: set, file: file}
	e.sums = make([]float64, len(e.targets))
	e.rt = &NodeRuntime{Ctx: context.Background()}
	e.onChunk = e.chunk
	e.compile = func(batch int) (*Program, *feeder, error) {
		p, err := Compile(g, CompileOptions{Batch: batch, Targets: e.targets, Shared: params, Workers: 1})
		if err != nil {
			return nil, nil, err
		}
		return p, newFeeder(g, p.Scope), nil
	}
	var err error
	if set != nil {
		e.rows, e.size, e.ordered = set.Rows, set.Rows, data.NewOrderedStream(set)
		e.full, e.ffull, err = e.compile(set.Rows)
		return e, err
	}
	// A streamed file is read once per run, in chunks; the program of its
	// shorter last chunk is compiled when the first run meets it, so no
	// pass counts the rows first.
	e.size = chunk
	e.full, e.ffull, err = e.compile(chunk)
	return e, err
}

func (e *evaluator) Close() {
	e.full.Close()
	if e.last != nil {
		e.last.Close()
	}
}

// run evaluates the set with the current values of the shared parameters:
// out[0] the loss, then the metrics in model order. It allocates nothing.
func (e *evaluator) run(ctx context.Context) ([]float64, error) {
	e.rt.Ctx = ctx
	if e.set != nil {
		if err := e.ffull.fill(e.ordered, 0); err != nil {
			return nil, err
		}
		if err := e.full.Run(e.rt); err != nil {
			return nil, err
		}
		for i, name := range e.targets {
			e.sums[i] = float64(e.full.Scope[name].F[0])
		}
		return e.sums, nil
	}
	clear(e.sums)
	e.rows = 0
	f := e.ffull
	if err := e.file.Epoch(f.dst, e.onChunk); err != nil {
		return nil, err
	}
	for i := range e.sums {
		e.sums[i] /= float64(e.rows)
	}
	return e.sums, nil
}

// chunk evaluates one chunk of a streamed file, n rows in the full
// program's tensors, and adds its row-weighted values to the sums.
func (e *evaluator) chunk(n int) error {
	if err := e.rt.Ctx.Err(); err != nil {
		return err
	}
	p, f := e.full, e.ffull
	if n < e.size {
		if e.last == nil {
			var err error
			if e.last, e.flst, err = e.compile(n); err != nil {
				return err
			}
			e.lastN = n
		} else if n != e.lastN {
			return errFileChanged
		}
		e.flst.copyPrefix(f)
		p = e.last
	}
	if err := p.Run(e.rt); err != nil {
		return err
	}
	for i, name := range e.targets {
		e.sums[i] += float64(n) * float64(p.Scope[name].F[0])
	}
	e.rows += n
	return nil
}

var errFileChanged = fmt.Errorf("the data file changed while it was read; do not write a data file during a run")

// copyPrefix copies the first rows of a chunk's tensors into the smaller
// ones of f (row-major: the first n rows are a prefix); nil: nothing.
func (f *feeder) copyPrefix(src *feeder) {
	for i, dst := range f.dst {
		if dst != nil {
			copy(dst.F, src.dst[i].F)
			copy(dst.I, src.dst[i].I)
		}
	}
}

// batch is the batch size the program was compiled at.
func (p *Program) batch() int {
	if p.Graph.Data != nil {
		for _, c := range p.Graph.Data.Columns() {
			if t := p.Scope[c.Name]; t != nil && len(t.Shape) > 0 {
				return t.Shape[0]
			}
		}
	}
	return 0
}

// heldOut is a run's held-out data: an in-memory set or a streamed file.
type heldOut struct {
	set  *data.Set
	file *data.FileStream
}

// openHeldOut opens the held-out file of a streamed model (data.eval.csv),
// normalized with the training file's statistics.
func openHeldOut(g *dsl.Graph, norm *data.Scaling) (*data.FileStream, error) {
	spec, err := data.Other(g.Data, g.Data.Eval.CSV)
	if err != nil {
		return nil, err
	}
	return data.OpenStreamScaled(spec, norm)
}

// Normalization statistics travel with a model's parameters in the
// safetensors metadata: normalize (the mode), normalize_shift and
// normalize_scale (JSON arrays, one number per feature column, exact to
// the bit: float64 written with the shortest round-trip form).
const (
	metaNormalize = "normalize"
	metaShift     = "normalize_shift"
	metaScale     = "normalize_scale"
)

func normMeta(meta map[string]string, sc *data.Scaling) {
	if sc == nil {
		return
	}
	list := func(xs []float64) string {
		parts := make([]string, len(xs))
		for i, x := range xs {
			parts[i] = strconv.FormatFloat(x, 'g', -1, 64)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	meta[metaNormalize], meta[metaShift], meta[metaScale] = sc.Mode, list(sc.Shift), list(sc.Scale)
}

// NormFromMeta reads the normalization statistics saved with a model (nil
// when the file has none).
func NormFromMeta(file string, meta map[string]string) (*data.Scaling, error) {
	mode, ok := meta[metaNormalize]
	if !ok {
		return nil, nil
	}
	sc := &data.Scaling{Mode: mode}
	if json.Unmarshal([]byte(meta[metaShift]), &sc.Shift) != nil || json.Unmarshal([]byte(meta[metaScale]), &sc.Scale) != nil || len(sc.Shift) != len(sc.Scale) {
		return nil, fmt.Errorf("%s: the normalization statistics in the file's metadata are malformed; save the model again", file)
	}
	return sc, nil
}

// SaveModel writes the named tensors of a scope and the normalization
// statistics of the training data (nil: none) to a safetensors file.
func SaveModel(path, model string, names []string, s Scope, norm *data.Scaling) error {
	out := map[string]*tensor.Tensor{}
	for _, name := range names {
		if t, ok := s[name]; ok {
			out[name] = t
		}
	}
	meta := map[string]string{"model": model, "format": "pt"}
	normMeta(meta, norm)
	return SaveSafetensors(path, out, meta)
}

// LoadModel reads a model's parameters from a safetensors file, checking
// that each parameter is there with the model's shape, and the
// normalization statistics saved with them. A file without statistics
// (written by a pserver checkpoint, or before psgraph saved them) gets
// those of the model's training data, computed again, and a warning.
func LoadModel(g *dsl.Graph, file string, log zerolog.Logger) (Scope, *data.Scaling, error) {
	ts, meta, err := LoadSafetensors(file)
	if err != nil {
		return nil, nil, err
	}
	types, err := g.Infer(1)
	if err != nil {
		return nil, nil, err
	}
	params := Scope{}
	for _, name := range g.Params() {
		t, ok := ts[name]
		if !ok {
			return nil, nil, fmt.Errorf("%s: parameter %q of %s is missing from the file; give the file psgraph saved for this model (--save)", file, name, g.File)
		}
		ty := types[name]
		if !t.Shape.Equal(ty.Shape) || t.DType != ty.DType {
			return nil, nil, fmt.Errorf("%s: %q is %s%v in the file but %s%v in %s; the file belongs to another model", file, name, t.DType, t.Shape, ty.DType, ty.Shape, g.File)
		}
		params[name] = t
	}
	norm, err := NormFromMeta(file, meta)
	if err != nil {
		return nil, nil, err
	}
	if d := g.Data; norm == nil && d != nil && d.Normalize != "none" && d.Features != nil {
		log.Warn().Str("file", file).Msg("the file has no normalization statistics; using those of the model's training data, computed again")
		if d.Stream {
			f, err := data.OpenStream(d)
			if err != nil {
				return nil, nil, err
			}
			norm = f.Scaling()
			f.Close()
		} else {
			sp, err := data.LoadSplit(d, nil)
			if err != nil {
				return nil, nil, err
			}
			norm = sp.Norm
		}
	}
	return params, norm, nil
}

// EvalOptions configures EvalModel.
type EvalOptions struct {
	InitFrom string // the parameters (required)
	Data     string // a data file with the model's columns; "": data.eval, or the model's data
	Log      zerolog.Logger
}

// EvalResult is the loss and metrics of a saved model over a data set,
// printed as JSON.
type EvalResult struct {
	Data    string // the file, or "held-out" for data.eval's fraction
	Rows    int
	Loss    float64
	Metrics map[string]float64
	order   []string
}

// MarshalJSON writes data, rows and loss, then the metrics in model order.
func (r *EvalResult) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	d, _ := json.Marshal(r.Data)
	fmt.Fprintf(&b, `{"data":%s,"rows":%d,"loss":%s`, d, r.Rows, jsonNum(r.Loss))
	for _, m := range r.order {
		k, _ := json.Marshal(m)
		fmt.Fprintf(&b, ",%s:%s", k, jsonNum(r.Metrics[m]))
	}
	b.WriteString("}")
	return []byte(b.String()), nil
}

// EvalModel computes the loss and metrics of a model's saved parameters
// over a data set, with the normalization statistics saved with them:
// --data FILE, else the model's held-out data (data.eval), else its data.
func EvalModel(ctx context.Context, g *dsl.Graph, opt EvalOptions) (*EvalResult, error) {
	if g.Train == nil || g.Data == nil {
		return nil, dsl.Errorf(dsl.Pos{File: g.File}, "eval needs the model's data and train sections (train.loss and train.metrics are what it computes)")
	}
	if g.Data.Label == nil {
		return nil, dsl.Errorf(g.Data.Pos, "eval needs labels: data has no label column; use psgraph predict to compute outputs without labels")
	}
	params, norm, err := LoadModel(g, opt.InitFrom, opt.Log)
	if err != nil {
		return nil, err
	}
	d := g.Data
	res := &EvalResult{Metrics: map[string]float64{}, order: g.Train.Metrics}
	var set *data.Set
	var file *data.FileStream
	path := opt.Data
	if path == "" && d.Eval != nil {
		path = d.Eval.CSV
	}
	if path == "" && d.Synthetic == nil && d.Eval == nil {
		path = d.CSV
	}
	switch {
	case path != "" && d.Stream:
		spec, err := data.Other(d, path)
		if err != nil {
			return nil, err
		}
		if file, err = data.OpenStreamScaled(spec, norm); err != nil {
			return nil, err
		}
		defer file.Close()
	case path != "":
		if set, err = data.LoadFile(d, path, norm); err != nil {
			return nil, err
		}
	default: // data.eval's fraction, or synthetic data
		sp, err := data.LoadSplit(d, norm)
		if err != nil {
			return nil, err
		}
		set, path = sp.Train, "synthetic"
		if sp.Eval != nil {
			set, path = sp.Eval, "held-out"
		}
	}
	res.Data = path
	ev, err := newEvaluator(g, set, file, params, EvalChunk)
	if err != nil {
		return nil, err
	}
	defer ev.Close()
	vals, err := ev.run(ctx)
	if err != nil {
		return nil, err
	}
	res.Rows, res.Loss = ev.rows, vals[0]
	for i, m := range g.Train.Metrics {
		res.Metrics[m] = vals[i+1]
	}
	return res, nil
}

// logEval evaluates the held-out data after step, logs the result and
// writes it to the metrics file as eval_loss and eval_<metric>. The
// values it returns are valid until the next evaluation.
func logEval(ctx context.Context, ev *evaluator, step int, g *dsl.Graph, opt RunOptions, w *bufio.Writer) ([]float64, error) {
	vals, err := ev.run(ctx)
	if err != nil {
		return nil, fmt.Errorf("evaluating the held-out data after step %d: %w", step, err)
	}
	e := opt.Log.Info().Int("step", step).Float64("eval_loss", vals[0])
	for i, m := range g.Train.Metrics {
		e = e.Float64("eval_"+m, vals[i+1])
	}
	e.Int("rows", ev.rows).Msg("eval")
	if w != nil {
		fmt.Fprintf(w, `{"step":%d,"role":%q,"eval_loss":%s`, step, opt.Role, jsonNum(vals[0]))
		for i, m := range g.Train.Metrics {
			k, _ := json.Marshal("eval_" + m)
			fmt.Fprintf(w, ",%s:%s", k, jsonNum(vals[i+1]))
		}
		w.WriteString("}\n")
	}
	return vals, nil
}

// Evaluate computes loss and metrics over the whole data set, in file
// order, with the given parameter values.
func Evaluate(g *dsl.Graph, set *data.Set, params Scope, sum *Summary) error {
	ev, err := newEvaluator(g, set, nil, params, 0)
	if err != nil {
		return err
	}
	defer ev.Close()
	return ev.into(g, sum)
}

// EvalChunk is the number of rows EvaluateStream evaluates at once (the
// training batch when that is larger).
const EvalChunk = 1024

// EvaluateStream computes loss and metrics over a streamed data file, in
// file order and in chunks of chunk rows: each result is the row-weighted
// mean of its values over the chunks, which is its value over the whole
// file when it is a mean over rows (mean, softmax_cross_entropy, accuracy,
// sigmoid_cross_entropy, mse), as Evaluate computes it in one batch.
func EvaluateStream(g *dsl.Graph, file *data.FileStream, params Scope, sum *Summary, chunk int) error {
	ev, err := newEvaluator(g, nil, file, params, chunk)
	if err != nil {
		return err
	}
	defer ev.Close()
	return ev.into(g, sum)
}

// into runs the evaluator once and writes its loss and metrics into sum.
func (e *evaluator) into(g *dsl.Graph, sum *Summary) error {
	vals, err := e.run(context.Background())
	if err != nil {
		return err
	}
	sum.Loss = vals[0]
	for i, m := range g.Train.Metrics {
		sum.Metrics[m] = vals[i+1]
	}
	return nil
}
