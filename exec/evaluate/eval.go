package evaluate

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/progress"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/data"
)

// Evaluator computes a model's loss and metrics over one data set with
// the parameters it shares. Its programs are compiled once, so evaluating
// every N steps of a run allocates nothing after the first evaluation.
//
// The set, in memory or a streamed file, is evaluated in chunks of a fixed
// number of rows, so its memory does not grow with the set's rows
// (TestEvalMemoryIsChunked). The loss and every metric but auc are the
// row-weighted means of their values over the chunks: their values over
// the set when they are means over rows (mean, softmax_cross_entropy,
// accuracy, sigmoid_cross_entropy, mse). An auc metric is computed over
// all the set's rows at once from the scores and labels of every chunk
// (kernels.AUCRows, 8 bytes per row): the value one batch of the whole set
// gives (TestChunkedAUCIsExact).
type Evaluator struct {
	targets []string
	set     *data.Set
	file    *data.FileStream
	Rows    int // of the last run
	ffull   *program.Feeder
	chunks  *chunks
	sums    []float64
	aucs    []aucMetric
	roots   []int // the targets that are rmse: summed as squares, the root taken at the end
	// Made once, so that a run allocates nothing.
	ordered *data.Stream
	rt      *program.Runtime
	onChunk func(n int) error
	// progress of a run (nil: none)
	rep   *progress.Reporter
	what  string
	phase *progress.Phase
}

// aucMetric is an auc metric: the index of its value among the targets,
// the names of its op's inputs, and the rows of the chunks so far.
type aucMetric struct {
	at            int
	scores, label string
	rows          kernels.AUCRows
}

// NewEvaluator evaluates the data of set (in memory) or file (streamed)
// with the parameters params, in chunks of chunk rows.
func NewEvaluator(g *dsl.Graph, set *data.Set, file *data.FileStream, params program.Scope, chunk int) (*Evaluator, error) {
	return NewEvaluatorTables(g, set, file, params, nil, nil, chunk)
}

// NewEvaluatorTables is NewEvaluator for a model with dynamic tables,
// which it reads from tables (by name) without changing them, or for a
// trainer's graph whose communication ops (a table's fetch_rows) talk
// through rv (nil: none): trainer 0 of a job with tables pulls the rows
// each chunk looks up from the pservers.
func NewEvaluatorTables(g *dsl.Graph, set *data.Set, file *data.FileStream, params program.Scope, tables map[string]*dyntable.Table, rv kernels.Rendezvous, chunk int) (*Evaluator, error) {
	e := &Evaluator{targets: append([]string{g.Train.Loss}, g.Train.Metrics...), set: set, file: file}
	e.sums = make([]float64, len(e.targets))
	e.rt = &program.Runtime{Ctx: context.Background(), RV: rv}
	var node kernels.Node
	if rv != nil {
		node.Role = ir.TrainerRole
	}
	e.onChunk = e.chunk
	compileTargets := e.targets
	for i, m := range e.targets {
		if op := producer(g, m); op != nil && op.Type == "auc" {
			e.aucs = append(e.aucs, aucMetric{at: i, scores: op.Inputs[0], label: op.Inputs[1]})
			compileTargets = append(compileTargets[:len(compileTargets):len(compileTargets)], op.Inputs...)
		}
		if op := producer(g, m); op != nil && op.Type == "rmse" {
			e.roots = append(e.roots, i)
		}
	}
	compile := func(batch int) (*program.Program, *program.Feeder, error) {
		p, err := program.Compile(g, program.CompileOptions{Batch: batch, Targets: compileTargets, Shared: params, Tables: tables, Workers: 1, Node: node})
		if err != nil {
			return nil, nil, err
		}
		return p, program.NewFeeder(g, p.Scope), nil
	}
	if chunk <= 0 {
		chunk = EvalChunk
	}
	if set != nil {
		e.ordered = data.NewOrderedStream(set)
		chunk = min(chunk, set.Rows)
	}
	var err error
	if e.chunks, err = newChunks(chunk, compile); err != nil {
		e.Close()
		return nil, err
	}
	e.ffull = e.chunks.ffull
	return e, nil
}

// producer is the op of g that outputs name (nil: none).
func producer(g *dsl.Graph, name string) *dsl.Op {
	for i := range g.Ops {
		if slices.Contains(g.Ops[i].Outputs, name) {
			return g.Ops[i]
		}
	}
	return nil
}

// Chunk is the number of rows the evaluator evaluates at once.
func (e *Evaluator) Chunk() int { return e.chunks.size }

// ReportTo makes every run report its progress to rep as a phase that
// does what ("evaluating the held-out data").
func (e *Evaluator) ReportTo(rep *progress.Reporter, what string) {
	e.rep, e.what, e.phase = rep, what, &progress.Phase{}
}

// Close releases the evaluator's programs.
func (e *Evaluator) Close() {
	if e.chunks != nil {
		e.chunks.close()
	}
}

// Run evaluates the set with the current values of the shared parameters:
// out[0] the loss, then the metrics in model order. It allocates nothing
// after the first run.
func (e *Evaluator) Run(ctx context.Context) ([]float64, error) {
	e.rt.Ctx = ctx
	clear(e.sums)
	for i := range e.aucs {
		e.aucs[i].rows.Reset()
	}
	e.Rows = 0
	if e.rep != nil {
		total := int64(-1)
		if e.set != nil {
			total = int64(e.set.Rows)
		} else if n := e.file.Rows(); n >= 0 {
			total = n
		}
		e.rep.Restart(e.phase, e.what, "rows", total)
	}
	if e.set != nil {
		for off := 0; off < e.set.Rows; off += e.chunks.size {
			if err := e.ffull.Fill(e.ordered, int64(off)); err != nil {
				return nil, err
			}
			if err := e.chunk(min(e.chunks.size, e.set.Rows-off)); err != nil {
				return nil, err
			}
		}
	} else if err := e.file.Epoch(e.ffull.Dst, e.onChunk); err != nil {
		return nil, err
	}
	e.phase.Done()
	for i := range e.sums {
		e.sums[i] /= float64(e.Rows)
	}
	for i := range e.aucs {
		e.sums[e.aucs[i].at] = e.aucs[i].rows.AUC()
	}
	for _, i := range e.roots {
		e.sums[i] = math.Sqrt(e.sums[i])
	}
	return e.sums, nil
}

// chunk evaluates one chunk, n rows in the full program's tensors, and
// adds its row-weighted values to the sums and its auc rows.
func (e *Evaluator) chunk(n int) error {
	if err := e.rt.Ctx.Err(); err != nil {
		return err
	}
	p, err := e.chunks.program(n)
	if err != nil {
		return err
	}
	if err := p.Run(e.rt); err != nil {
		return err
	}
	for i, name := range e.targets {
		v := float64(p.Scope[name].F[0])
		if slices.Contains(e.roots, i) {
			v *= v
		}
		e.sums[i] += float64(n) * v
	}
	for i := range e.aucs {
		a := &e.aucs[i]
		if err := a.rows.Add(p.Scope[a.scores], p.Scope[a.label], n); err != nil {
			return err
		}
	}
	e.Rows += n
	if e.rep != nil {
		e.phase.Add(int64(n))
	}
	return nil
}

// HeldOut is a run's held-out data: an in-memory set or a streamed file.
type HeldOut struct {
	Set  *data.Set
	File *data.FileStream
}

// OpenHeldOut opens the held-out file of a streamed model (data.eval.csv),
// normalized with the training file's statistics.
func OpenHeldOut(g *dsl.Graph, norm *data.Scaling) (*data.FileStream, error) {
	spec, err := data.Other(g.Data, g.Data.Eval.CSV)
	if err != nil {
		return nil, err
	}
	return data.OpenStreamScaled(spec, norm)
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
	// Note says that the loss or a metric depends on the rows batched
	// together and was computed at another batch than training's
	// (BatchNote); "" otherwise.
	Note  string
	order []string
}

// MarshalJSON writes data, rows and loss, then the metrics in model
// order, then the note when there is one.
func (r *EvalResult) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	d, _ := json.Marshal(r.Data)
	fmt.Fprintf(&b, `{"data":%s,"rows":%d,"loss":%s`, d, r.Rows, JSONNum(r.Loss))
	for _, m := range r.order {
		k, _ := json.Marshal(m)
		fmt.Fprintf(&b, ",%s:%s", k, JSONNum(r.Metrics[m]))
	}
	if r.Note != "" {
		n, _ := json.Marshal(r.Note)
		fmt.Fprintf(&b, `,"note":%s`, n)
	}
	b.WriteString("}")
	return []byte(b.String()), nil
}

// EvalModel computes the loss and metrics of a model's saved parameters
// over a data set, with the normalization statistics saved with them:
// --data FILE, else the model's held-out data (data.eval), else its data.
// A model without a label column is evaluated alike: its loss reads other
// data (a two-tower model's in-batch softmax, whose positives are the
// rows' own items).
func EvalModel(ctx context.Context, g *dsl.Graph, opt EvalOptions) (*EvalResult, error) {
	if g.Train == nil || g.Data == nil {
		return nil, dsl.Errorf(dsl.Pos{File: g.File}, "eval needs the model's data and train sections (train.loss and train.metrics are what it computes)")
	}
	params, norm, err := modelfile.LoadModel(g, opt.InitFrom, opt.Log)
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
		if o := d.Online; o != nil && (o.Kafka != nil || o.Stdin || o.Dir) {
			return nil, dsl.Errorf(o.Pos, "eval reads a file, and the model's data is the online source %s: give --data FILE (rows in its format) or data.eval: {csv: FILE}", o.Source(d.CSV))
		}
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
	ev, err := NewEvaluator(g, set, file, params, max(g.Batch(), EvalChunk))
	if err != nil {
		return nil, err
	}
	defer ev.Close()
	if res.Note = BatchNote(g, ev.Chunk(), g.Batch()); res.Note != "" {
		opt.Log.Warn().Msg(res.Note)
	}
	vals, err := ev.Run(ctx)
	if err != nil {
		return nil, err
	}
	res.Rows, res.Loss = ev.Rows, vals[0]
	for i, m := range g.Train.Metrics {
		res.Metrics[m] = vals[i+1]
	}
	return res, nil
}

// EvalChunk is the number of rows an evaluation computes at once (the
// training batch when that is larger).
const EvalChunk = 1024

// JSONNum writes v for a JSON summary: 6 significant digits, null for
// NaN and infinities.
func JSONNum(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "null"
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// BatchNote is what to say about an evaluation in chunks of chunk rows of
// a model trained at batch batch: "" unless its loss or a metric depends
// on the rows batched together (dsl.Graph.Coupled: in-batch negatives)
// and chunk is not batch. Such a value is then that of chunk-row batches,
// not comparable with the training batches' values.
func BatchNote(g *dsl.Graph, chunk, batch int) string {
	if g.Train == nil || chunk == batch {
		return ""
	}
	var names []string
	var where *dsl.Coupling
	for _, v := range append([]string{g.Train.Loss}, g.Train.Metrics...) {
		c, err := g.Coupled(v)
		if err != nil || c == nil {
			continue
		}
		names = append(names, v)
		if where == nil {
			where = c
		}
	}
	if where == nil {
		return ""
	}
	verb := "depends"
	if len(names) > 1 {
		verb = "depend"
	}
	return fmt.Sprintf("%s %s on the rows batched together (%s, at %s): this evaluation ran in chunks of %d rows (the last one holds the rest), not at the training batch of %d, so these values are those of %d-row batches and differ from the training batches' for that reason too",
		strings.Join(names, " and "), verb, where.Why, where.Pos, chunk, batch, chunk)
}
