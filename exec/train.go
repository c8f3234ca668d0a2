package exec

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/transport"
)

// RunOptions configures a training run of one node.
type RunOptions struct {
	Role     string // "local", "trainer"
	Steps    int    // 0: the model's train.steps
	Batch    int    // 0: the model's train.batch
	InitFrom string // safetensors file with initial parameters
	Save     string // safetensors file to write the final parameters to
	Metrics  string // JSON-lines file, one object per logged step
	LogEvery int    // log every N steps (0: about 10 lines per run)
	Log      zerolog.Logger

	TrainerIndex, TrainerCount int
	// Comm connects a trainer to its pservers (nil for a local run).
	Comm Comm
	// Params names the model's parameters a distributed trainer receives
	// after its last step, to save and evaluate them.
	Params []string
	// Checkpoint, for a local run, saves the parameters and optimizer state
	// every Every steps and resumes from the newest checkpoint.
	Checkpoint *Checkpointer
	// StartStep is the step a distributed trainer starts at: the step its
	// pservers resumed from (0 for a fresh job); < 0: learn it from the
	// step of the first parameter message the pservers send (they send the
	// step they are at: 0, a restored checkpoint's, or a running job's to
	// a restarted trainer).
	StartStep int
	// PServerTimeout: how long a distributed trainer waits for a lost
	// pserver to come back, the same process or a restarted one, before
	// it fails (0: fail at once).
	PServerTimeout time.Duration
	// Prom, when set, counts the steps and their time for Prometheus
	// (--metrics-addr); RunTrainer also counts its traffic per pserver.
	Prom *metrics.Node
}

// Summary is the result of a run, printed as the last line of stdout.
type Summary struct {
	Role      string
	Steps     int
	Seconds   float64
	StepsPerS float64
	// What the node's endpoint moved in the job, read once its pservers
	// finished (transport.Traffic; 0 for a local run; docs/runtime.md).
	SentBytes, RecvBytes         int64
	WireSentBytes, WireRecvBytes int64
	Loss                         float64
	Metrics                      map[string]float64
	order                        []string
	// Eval holds eval_loss and eval_<metric> over the held-out data
	// (data.eval) with the final parameters, EvalRows its rows; nil when
	// the node did not evaluate.
	Eval     map[string]float64
	EvalRows int
}

// MarshalJSON writes the fixed keys first, then the metrics in model order.
func (s *Summary) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, `{"role":%q,"steps":%d,"seconds":%s,"steps_per_s":%s,"sent_bytes":%d,"recv_bytes":%d,"wire_sent_bytes":%d,"wire_recv_bytes":%d,"loss":%s`,
		s.Role, s.Steps, jsonNum(s.Seconds), jsonNum(s.StepsPerS), s.SentBytes, s.RecvBytes, s.WireSentBytes, s.WireRecvBytes, jsonNum(s.Loss))
	for _, m := range s.order {
		k, _ := json.Marshal(m)
		fmt.Fprintf(&b, ",%s:%s", k, jsonNum(s.Metrics[m]))
	}
	if s.Eval != nil {
		fmt.Fprintf(&b, `,"eval_rows":%d,"eval_loss":%s`, s.EvalRows, jsonNum(s.Eval["eval_loss"]))
		for _, m := range s.order {
			k, _ := json.Marshal("eval_" + m)
			fmt.Fprintf(&b, ",%s:%s", k, jsonNum(s.Eval["eval_"+m]))
		}
	}
	b.WriteString("}")
	return []byte(b.String()), nil
}

func jsonNum(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "null"
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// Train runs the training loop of a model on this node: feed the step's
// batch by the data stream rule, run the program, log; at the end save the
// parameters and evaluate loss and metrics over the whole data set.
// A trainer that fails tells its pservers why (they stop the job at once
// and pass the reason on to the other trainers).
func Train(ctx context.Context, g *dsl.Graph, opt RunOptions) (*Summary, error) {
	sum, err := runTraining(ctx, g, opt)
	if err != nil && ctx.Err() == nil && opt.Comm != nil {
		opt.Comm.StopJob(err)
	}
	return sum, err
}

func runTraining(ctx context.Context, g *dsl.Graph, opt RunOptions) (*Summary, error) {
	if g.Train == nil {
		return nil, dsl.Errorf(dsl.Pos{File: g.File}, "the model has no train section: add train: {loss, batch, steps, optimizer}")
	}
	if g.Data == nil {
		return nil, dsl.Errorf(dsl.Pos{File: g.File}, "the model has no data section: training needs data")
	}
	batch := opt.Batch
	if batch <= 0 {
		batch = g.Train.Batch
	}
	n := max(opt.TrainerCount, 1)
	if opt.Steps <= 0 && g.Train.Steps <= 0 && g.Train.Epochs <= 0 {
		return nil, stepsMissing(g)
	}
	// The data: in memory, or streamed from its file (data.stream).
	// The held-out data (data.eval) is normalized with the training
	// data's statistics, which are saved with the parameters.
	var set *data.Set
	var file *data.FileStream
	var stream data.Batches
	var held heldOut
	var norm *data.Scaling
	if g.Data.Stream {
		f, err := data.OpenStream(g.Data)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		file, stream, norm = f, f, f.Scaling()
	} else {
		sp, err := data.LoadSplit(g.Data, nil)
		if err != nil {
			return nil, err
		}
		set, stream, norm, held.set = sp.Train, data.NewStream(sp.Train), sp.Norm, sp.Eval
	}
	rows := func() (int64, error) { return data.Rows(g.Data) }
	if set != nil {
		rows = func() (int64, error) { return int64(set.Rows), nil }
	}
	steps, err := StepsOf(g, opt.Steps, batch, n, rows)
	if err != nil {
		return nil, err
	}
	// Who evaluates the held-out data: a local run, and trainer 0 of a
	// split job, with the parameters it received. A trainer of a job with
	// lookup tables holds only the rows it fetched, so it does not.
	tables := opt.Comm != nil && hasOp(g, "fetch_rows")
	evaluates := g.Data.Eval != nil && (opt.Comm == nil || opt.TrainerIndex == 0 && !tables)
	if g.Data.Eval != nil && tables && opt.TrainerIndex == 0 {
		opt.Log.Warn().Msg("data.eval: a trainer of a job with lookup tables holds only the table rows it fetched, so it does not evaluate the held-out data; evaluate the saved model with psgraph eval")
	}
	if evaluates && g.Data.Stream {
		f, err := openHeldOut(g, norm)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		held.file = f
	}
	var pin []string
	if evaluates && opt.Comm != nil {
		pin = opt.Params // the received parameters, which evaluation reads
	}
	prog, err := Compile(g, CompileOptions{Batch: batch, Pin: pin})
	if err != nil {
		return nil, err
	}
	defer prog.Close()
	if opt.Comm != nil && opt.InitFrom != "" {
		return nil, fmt.Errorf("--init-from belongs to the pservers: they hold the parameters and serve them to the trainers")
	}
	if err := InitPersistent(prog, opt.InitFrom); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	prog.OnError = func(error) { cancel() }
	feed := newFeeder(g, prog.Scope)

	var metricsOut *bufio.Writer
	if opt.Metrics != "" {
		f, err := os.Create(opt.Metrics)
		if err != nil {
			return nil, fmt.Errorf("cannot write metrics: %w", err)
		}
		defer f.Close()
		metricsOut = bufio.NewWriter(f)
		defer metricsOut.Flush()
	}
	logEvery := opt.LogEvery
	if logEvery <= 0 {
		logEvery = max(1, steps/10)
	}
	rt := &NodeRuntime{Ctx: ctx, Comm: opt.Comm, TrainerIndex: opt.TrainerIndex, TrainerCount: n}
	first := opt.StartStep
	if first < 0 { // learn it from the pservers' first parameter messages
		first = 0
		if nc, ok := opt.Comm.(interface {
			LearnStep(context.Context, *dsl.Graph) (int64, error)
		}); ok {
			k, err := nc.LearnStep(ctx, prog.Graph)
			if err != nil {
				return nil, err
			}
			first = int(k)
			if k > 0 {
				opt.Log.Info().Int64("step", k).Msg("joining at the pservers' step")
			}
		}
	}
	if ck := opt.Checkpoint; ck != nil && opt.Comm == nil {
		ck.Prom = opt.Prom
		c, err := ck.resumeStep(-1)
		if err != nil {
			return nil, err
		}
		if c >= 0 {
			if err := ck.Restore(c, persistentOf(prog)); err != nil {
				return nil, err
			}
			first = int(c)
			opt.Log.Info().Int64("step", c).Str("dir", ck.Dir).Msg("resumed from checkpoint")
		}
	}
	if first > steps {
		return nil, fmt.Errorf("the run resumes at step %d, after its last step %d; raise --steps", first, steps)
	}
	loss := prog.Scope[g.Train.Loss]
	// A trainer of a job with lookup tables holds only the rows it fetched,
	// so it cannot evaluate the whole data set at the end: its summary has
	// the mean loss and metrics of the last steps it trained instead.
	var tail *tailMean
	if tables {
		tail = &tailMean{names: append([]string{g.Train.Loss}, g.Train.Metrics...)}
	}
	// The held-out evaluator shares the parameters of the training program:
	// a local run's own, a trainer's received ones (the values it computed
	// its last step with, one update behind the pservers).
	var ev *evaluator
	if evaluates {
		shared := Scope{}
		names := g.Params()
		if opt.Comm != nil {
			names = opt.Params
		}
		for _, name := range names {
			if t := prog.Scope[name]; t != nil {
				shared[name] = t
			}
		}
		if ev, err = newEvaluator(g, held.set, held.file, shared, max(batch, EvalChunk)); err != nil {
			return nil, err
		}
		defer ev.Close()
	}
	evalEvery := g.Train.EvalEvery
	start := time.Now()
	last, lastStep := start, first
	opt.Prom.SetReady(true)
	stepStart := start
	for k := first; k < steps; k++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := feed.fill(stream, int64(k)*int64(n*batch)+int64(opt.TrainerIndex*batch)); err != nil {
			return nil, err
		}
		rt.StepNum = int64(k)
		if opt.Comm != nil {
			if err := opt.Comm.Flush(ctx); err != nil {
				return nil, err
			}
		}
		if err := prog.Run(rt); err != nil {
			return nil, err
		}
		if opt.Prom != nil {
			now := time.Now()
			opt.Prom.Step(now.Sub(stepStart))
			stepStart = now
		}
		if tail != nil && k >= steps-tailSteps {
			tail.add(prog.Scope)
		}
		// Every ck.Every steps, and at the last step: a finished run can be
		// continued from where it ended.
		if ck := opt.Checkpoint; ck != nil && ck.Every > 0 && opt.Comm == nil && ((k+1)%ck.Every == 0 || k == steps-1) {
			if err := ck.Save(int64(k+1), persistentOf(prog)); err != nil {
				return nil, err
			}
		}
		// Step 1 is logged too, so a loss curve starts where training does.
		if (k+1)%logEvery == 0 || k == steps-1 || k == 0 {
			now := time.Now()
			sps := float64(k+1-lastStep) / now.Sub(last).Seconds()
			last, lastStep = now, k+1
			ev := opt.Log.Info().Int("step", k+1).Float64("loss", float64(loss.F[0]))
			for _, m := range g.Train.Metrics {
				ev = ev.Float64(m, float64(prog.Scope[m].F[0]))
			}
			// Progress: of the run's steps, done, and the time left at the
			// run's rate so far.
			eta := time.Duration(float64(now.Sub(start)) / float64(k+1-first) * float64(steps-k-1))
			ev.Float64("steps_per_s", math.Round(sps)).Int("of", steps).Int("pct", 100*(k+1)/steps).
				Str("eta", eta.Round(time.Second).String()).Msg("train")
			if metricsOut != nil {
				writeMetrics(metricsOut, k+1, g, prog.Scope, sps, opt.Role)
			}
			if math.IsNaN(float64(loss.F[0])) {
				return nil, fmt.Errorf("step %d: the loss is NaN; lower the learning rate or check the data normalization", k+1)
			}
		}
		if ev != nil && evalEvery > 0 && (k+1)%evalEvery == 0 && k < steps-1 {
			if _, err := logEval(ctx, ev, k+1, g, opt, metricsOut); err != nil {
				return nil, err
			}
		}
	}
	elapsed := time.Since(start).Seconds()
	reportTruncated(opt.Log, set, file)
	params, names := Scope{}, g.Params()
	for _, name := range names {
		params[name] = prog.Scope[name]
	}
	if opt.Comm != nil {
		// The pservers serve step `steps` parameters after the last update.
		fin, err := Compile(g, CompileOptions{Batch: batch, Targets: opt.Params})
		if err != nil {
			return nil, err
		}
		defer fin.Close()
		fin.OnError = prog.OnError
		rt.StepNum = int64(steps)
		if err := fin.Run(rt); err != nil {
			return nil, fmt.Errorf("receiving the final parameters: %w", err)
		}
		if err := opt.Comm.Finish(ctx); err != nil {
			return nil, err
		}
		for _, err := range opt.Comm.AwaitPeers(ctx) {
			opt.Log.Warn().Err(err).Msg("after the last step")
		}
		for _, name := range opt.Params {
			params[name] = fin.Scope[name]
			if t := prog.Scope[name]; ev != nil && t != nil {
				t.CopyFrom(fin.Scope[name]) // the evaluator reads these
			}
		}
		names = append(names, opt.Params...)
	}
	if opt.Save != "" {
		if err := SaveModel(opt.Save, g.Name, names, params, norm); err != nil {
			return nil, err
		}
		opt.Log.Info().Str("file", opt.Save).Msg("saved parameters")
	}
	sum := &Summary{Role: opt.Role, Steps: steps, Seconds: elapsed, StepsPerS: float64(steps-first) / elapsed, Metrics: map[string]float64{}, order: g.Train.Metrics}
	if c, ok := opt.Comm.(interface{ Traffic() transport.Traffic }); ok {
		tr := c.Traffic() // the pservers are done: nothing more arrives
		sum.SentBytes, sum.RecvBytes, sum.WireSentBytes, sum.WireRecvBytes = tr.Sent, tr.Recv, tr.WireSent, tr.WireRecv
	}
	if ev != nil {
		vals, err := logEval(ctx, ev, steps, g, opt, metricsOut)
		if err != nil {
			return nil, err
		}
		sum.EvalRows = ev.rows
		sum.Eval = map[string]float64{"eval_loss": vals[0]}
		for i, m := range g.Train.Metrics {
			sum.Eval["eval_"+m] = vals[i+1]
		}
	}
	if tail != nil {
		tail.fill(sum)
		return sum, nil
	}
	if set != nil {
		err = Evaluate(g, set, params, sum)
	} else {
		err = EvaluateStream(g, file, params, sum, max(batch, EvalChunk))
	}
	if err != nil {
		return nil, err
	}
	return sum, nil
}

// StepsOf is the number of steps a run trains: steps (--steps) when
// positive, else the model's train.steps, else train.epochs passes over
// the data set's rows by all trainers: ceil(epochs x rows / (batch x
// trainers)), so that every row is read epochs times and the last step
// may run into the next pass (TestEpochsSetSteps). rows is called only
// for epochs.
func StepsOf(g *dsl.Graph, steps, batch, trainers int, rows func() (int64, error)) (int, error) {
	switch {
	case steps > 0:
		return steps, nil
	case g.Train.Steps > 0:
		return g.Train.Steps, nil
	case g.Train.Epochs <= 0:
		return 0, stepsMissing(g)
	}
	r, err := rows()
	if err != nil {
		return 0, err
	}
	per := int64(batch) * int64(max(trainers, 1))
	k := (int64(g.Train.Epochs)*r + per - 1) / per
	if k > math.MaxInt32 {
		return 0, dsl.Errorf(g.Train.Pos, "train.epochs %d over %d rows at %d rows per step is %d steps, too many; lower epochs or raise train.batch", g.Train.Epochs, r, per, k)
	}
	return int(k), nil
}

func stepsMissing(g *dsl.Graph) error {
	return dsl.Errorf(g.Train.Pos, "train.steps is not set; give train.steps or train.epochs in the model, or --steps")
}

// tailSteps is how many final steps a trainer with lookup tables averages
// its summary's loss and metrics over.
const tailSteps = 100

// tailMean averages scalars over the last steps of a run.
type tailMean struct {
	names []string
	sums  []float64
	n     int
}

func (m *tailMean) add(s Scope) {
	if m.sums == nil {
		m.sums = make([]float64, len(m.names))
	}
	for i, name := range m.names {
		m.sums[i] += float64(s[name].F[0])
	}
	m.n++
}

func (m *tailMean) fill(sum *Summary) {
	if m.n == 0 {
		sum.Loss = math.NaN()
		return
	}
	sum.Loss = m.sums[0] / float64(m.n)
	for i, name := range m.names[1:] {
		sum.Metrics[name] = m.sums[i+1] / float64(m.n)
	}
}

func hasOp(g *dsl.Graph, typ string) bool {
	for _, op := range g.Ops {
		if op.Type == typ {
			return true
		}
	}
	return false
}

func writeMetrics(w *bufio.Writer, step int, g *dsl.Graph, s Scope, sps float64, role string) {
	fmt.Fprintf(w, `{"step":%d,"role":%q,"loss":%s`, step, role, jsonNum(float64(s[g.Train.Loss].F[0])))
	for _, m := range g.Train.Metrics {
		k, _ := json.Marshal(m)
		fmt.Fprintf(w, ",%s:%s", k, jsonNum(float64(s[m].F[0])))
	}
	fmt.Fprintf(w, `,"steps_per_s":%s}`+"\n", jsonNum(sps))
}

// feeder writes batches into the data variables of a scope: dst holds
// the scope's tensor of each of d's data variables, in data order (nil
// where the program has none).
type feeder struct{ dst []*tensor.Tensor }

func newFeeder(g *dsl.Graph, s Scope) *feeder { return feederOf(g.Data, s) }

// feederOf is the feeder of data spec d, which may differ from the
// graph's (prediction reads no label).
func feederOf(d *dsl.Data, s Scope) *feeder {
	f := &feeder{}
	if d != nil {
		for _, c := range d.Columns() {
			f.dst = append(f.dst, s[c.Name])
		}
	}
	return f
}

func (f *feeder) fill(st data.Batches, start int64) error {
	return st.Fill(start, f.dst)
}

// empty says whether the program reads none of the data variables.
func (f *feeder) empty() bool {
	for _, t := range f.dst {
		if t != nil {
			return false
		}
	}
	return true
}
