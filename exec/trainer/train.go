package trainer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"strings"
	"time"

	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/progress"
	"github.com/psgraph/psgraph/exec/tensor"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/transport"
)

// RunOptions configures a training run of one node.
type RunOptions struct {
	Role  string // "local", "trainer"
	Steps int    // 0: the model's train.steps
	Batch int    // 0: the model's train.batch
	// Transfers is a distributed trainer's transfer table at Batch
	// (dsl.Graph.Transfers), computed once for the job (job.Job.Transfers).
	Transfers []dsl.Transfer
	// InitFrom is a safetensors file of initial values: a local run's
	// parameters and state; a distributed trainer reads from it only the
	// persistent variables it holds (the model's own state, such as
	// batch_norm's running statistics; a parameter placed on the trainer),
	// the pservers serving the others.
	InitFrom string
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
	// every Every steps and resumes from the newest checkpoint. A
	// distributed trainer that holds persistent variables (the model's own
	// state, a parameter placed on it) saves them as node trainer-<index>
	// at the steps the pservers checkpoint, and a trainer starting at step
	// s > 0 restores them from its newest checkpoint at or before s
	// (trainerState).
	Checkpoint *modelfile.Checkpointer
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
	// Clock is the clock of the progress lines of long phases (nil:
	// time.Now); tests inject one.
	Clock func() time.Time
	// FinalPass: whether the summary's loss and metrics are computed over
	// the whole training data after the last step, or are the mean of the
	// last 100 steps' batch values.
	FinalPass FinalPass
	// Stop, closed, asks the run to stop (SIGTERM, SIGINT). A local run of
	// an online source then finishes its step, checkpoints, saves and
	// returns its summary, and so does a trainer of a split job given a
	// Halt (at the step its job agrees on), while its context ending stops
	// it at once; any other run ends as if its context ended.
	Stop <-chan struct{}
	// Halt, for a trainer of a split job reading an online source, is its
	// part in the job's stop (comm.Halt): the job stops when any of its
	// nodes is asked to (Stop here, a signal elsewhere), its trainers at
	// one step in a sync job. nil: Stop stops this trainer alone, as it
	// would a local run.
	Halt Halt
	// Stdin is the standard input an online source csv: "-" reads (nil:
	// os.Stdin).
	Stdin io.Reader
	// State, for trainer 0 of a job that follows serving replicas, takes
	// the model's variables the trainer holds (batch_norm's running
	// statistics, a parameter placed on it), which no pserver has, after
	// every step and at the end (nil: none; state.go).
	State StateSink
}

// FinalPass says whether a run ends with a pass over its whole training
// data for its summary (--final-pass).
type FinalPass uint8

const (
	// FinalPassAuto passes over data held in memory, not over a streamed
	// file: reading a file of millions of rows again takes about as long
	// as a pass of training.
	FinalPassAuto FinalPass = iota
	FinalPassOn
	FinalPassOff
)

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
	// Note says that the loss or a metric depends on the rows batched
	// together and an evaluation computed it at another batch than the
	// training batch (evaluate.BatchNote); "" otherwise.
	Note string
	// Tables is the state of the run's dynamic tables at its end (live
	// rows, admissions, evictions, bytes); nil without them.
	Tables []metrics.TableStats
	// Stream is what a run of an online source read (nil for others);
	// the loss and metrics are then its progressive validation's, over
	// its last data.metrics_window rows.
	Stream *StreamSummary
}

// MarshalJSON writes the fixed keys first, then the metrics in model order.
func (s *Summary) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, `{"role":%q,"steps":%d,"seconds":%s,"steps_per_s":%s,"sent_bytes":%d,"recv_bytes":%d,"wire_sent_bytes":%d,"wire_recv_bytes":%d,"loss":%s`,
		s.Role, s.Steps, evaluate.JSONNum(s.Seconds), evaluate.JSONNum(s.StepsPerS), s.SentBytes, s.RecvBytes, s.WireSentBytes, s.WireRecvBytes, evaluate.JSONNum(s.Loss))
	for _, m := range s.order {
		k, _ := json.Marshal(m)
		fmt.Fprintf(&b, ",%s:%s", k, evaluate.JSONNum(s.Metrics[m]))
	}
	if s.Eval != nil {
		fmt.Fprintf(&b, `,"eval_rows":%d,"eval_loss":%s`, s.EvalRows, evaluate.JSONNum(s.Eval["eval_loss"]))
		for _, m := range s.order {
			k, _ := json.Marshal("eval_" + m)
			fmt.Fprintf(&b, ",%s:%s", k, evaluate.JSONNum(s.Eval["eval_"+m]))
		}
	}
	if s.Note != "" {
		n, _ := json.Marshal(s.Note)
		fmt.Fprintf(&b, `,"note":%s`, n)
	}
	writeTables(&b, s.Tables)
	if s.Stream != nil {
		st, _ := json.Marshal(s.Stream)
		fmt.Fprintf(&b, `,"stream":%s`, st)
	}
	b.WriteString("}")
	return []byte(b.String()), nil
}

// Comm is a trainer's communication as its loop uses it: the rendezvous
// its kernels send and receive through, and the job's life around the
// steps (comm.Trainer implements it).
type Comm interface {
	kernels.Rendezvous
	// Flush waits until the messages handed to Send were written, so
	// their memory may change again; the loop calls it before every step.
	Flush(ctx context.Context) error
	// Finish tells every pserver this trainer sends nothing more.
	Finish(ctx context.Context) error
	// AwaitPeers waits until every pserver finished too (errors: lost).
	AwaitPeers(ctx context.Context) []error
	// StopJob tells every pserver this trainer stops the job because of
	// err, and returns err.
	StopJob(err error) error
	// LearnStep is the step a trainer that learns its start joins at.
	LearnStep(ctx context.Context) (int64, error)
	// Traffic is what the endpoint moved so far.
	Traffic() transport.Traffic
	// Pull receives rows of pserver shard's part of table (comm.Pull):
	// trainer 0 of a job with tables evaluates and saves through it.
	Pull(ctx context.Context, shard int, table string, r comm.Pull, dst []float32) error
}

// Train runs the training loop of a model on this node: feed the step's
// batch by the data stream rule, run the program, log; at the end save the
// parameters and evaluate loss and metrics over the whole data set.
// A trainer that fails tells its pservers why (they stop the job at once
// and pass the reason on to the other trainers).
func Train(ctx context.Context, g *dsl.Graph, opt RunOptions) (*Summary, error) {
	if g.Train == nil {
		return nil, dsl.Errorf(dsl.Pos{File: g.File}, "the model has no train section: add train: {loss, batch, steps, optimizer}")
	}
	if g.Data == nil {
		return nil, dsl.Errorf(dsl.Pos{File: g.File}, "the model has no data section: training needs data")
	}
	if opt.Steps <= 0 && g.Train.Steps <= 0 && g.Train.Epochs <= 0 && !g.Data.IsOnline() {
		return nil, stepsMissing(g)
	}
	if g.Data.IsOnline() {
		if err := onlineUsage(g, opt); err != nil {
			return nil, err
		}
	}
	// Stopped, an online run finishes its step, checkpoints and ends (ctx
	// ending stops it at once); any other run ends as if ctx ended.
	graceful := g.Data.IsOnline() && (opt.Comm == nil || opt.Halt != nil)
	if opt.Stop != nil && !graceful {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-opt.Stop:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	if opt.Comm != nil && opt.InitFrom != "" && len(g.Persistent()) == 0 && !g.Normalizes() {
		return nil, fmt.Errorf("--init-from belongs to the pservers: they hold the parameters and serve them to the trainers (a trainer reads from it only what it holds, such as batch_norm's running statistics, and the normalization statistics, and this trainer of %s needs neither)", g.Name)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &run{ctx: ctx, cancel: cancel, g: g, opt: opt}
	defer r.close()
	sum, err := r.train()
	if err != nil && ctx.Err() == nil && opt.Comm != nil {
		opt.Comm.StopJob(err)
	}
	return sum, err
}

// run is one training run, phase by phase: open the data, compile, find
// the first step, the loop, and the end (final parameters, save, summary).
type run struct {
	ctx    context.Context
	cancel context.CancelFunc
	g      *dsl.Graph
	opt    RunOptions
	batch  int
	n      int // trainers
	steps  int
	first  int
	// the data: in memory, or streamed from its file (data.stream); the
	// held-out data (data.eval) is normalized with the training data's
	// statistics, which are saved with the parameters.
	set    *data.Set
	file   *data.FileStream
	stream data.Batches
	norm   *data.Scaling
	held   evaluate.HeldOut
	on     *online       // an online source (online.go); nil for the others
	halt   Halt          // whether an online run's next step runs (online.go)
	own    *trainerState // what a distributed trainer checkpoints of its own (nil: nothing; state.go)
	served program.Scope // the model's variables it holds, for opt.State (nil: none)
	// tables: a trainer of a job with lookup tables; evaluates: it
	// evaluates the held-out data. pulls is the evaluation's rendezvous
	// in a job with tables (pull.go).
	tables, evaluates bool
	pulls             *pullRendezvous
	prog              *program.Program
	feed              *program.Feeder
	rt                *program.Runtime
	ev                *evaluate.Evaluator
	tail              *window // the last tailSteps steps
	metrics           *bufio.Writer
	closers           []func()
}

// progress reports the progress of the run's long phases to its log.
func (r *run) progress() *progress.Reporter {
	return &progress.Reporter{Log: r.opt.Log, Now: r.opt.Clock}
}

func (r *run) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

func (r *run) train() (*Summary, error) {
	if err := r.openData(); err != nil {
		return nil, err
	}
	if err := r.compile(); err != nil {
		return nil, err
	}
	if err := r.startStep(); err != nil {
		return nil, err
	}
	if r.served != nil {
		r.opt.State.Offer(int64(r.first), r.served) // the initial or restored state
	}
	start := time.Now()
	if err := r.loop(start); err != nil {
		return nil, err
	}
	if r.served != nil {
		// The last step's state reaches pserver 0 before the job ends (the
		// replicas serve the job's last step).
		if err := r.opt.State.Flush(r.ctx, int64(r.steps), r.served); err != nil {
			r.opt.Log.Warn().Err(err).Msg("the serving replicas may not get this trainer's last state")
		}
	}
	return r.end(time.Since(start).Seconds())
}

// openData opens the training data and the held-out data and resolves
// the run's steps.
func (r *run) openData() error {
	g, opt := r.g, r.opt
	r.batch = opt.Batch
	if r.batch <= 0 {
		r.batch = g.Train.Batch
	}
	r.n = max(opt.TrainerCount, 1)
	saved, err := modelfile.SavedScaling(g, opt.InitFrom)
	if err != nil {
		return err
	}
	from, what := opt.InitFrom, "saved in --init-from"
	// A local run resumed from a checkpoint goes on with the statistics
	// that checkpoint was trained with (--init-from's, when the run that
	// wrote it had one), with or without --init-from now.
	if ck := opt.Checkpoint; ck != nil && opt.Comm == nil && g.Normalizes() {
		if c, err := ck.ResumeStep(-1); err != nil {
			return err
		} else if c >= 0 {
			sc, err := modelfile.CheckpointScaling(g, ck, c)
			if err != nil {
				return err
			}
			if sc != nil {
				saved, from, what = sc, ck.Dir, "of the checkpoint resumed from"
			}
		}
	}
	opened := func(err error) error {
		if err != nil && saved != nil {
			return fmt.Errorf("with the normalization statistics %s (%s): %w", what, from, err)
		}
		if saved != nil {
			opt.Log.Info().Str("from", from).Str("normalize", saved.Mode).Msg("normalizing the features with the statistics " + what + ", not the data's own")
		}
		return err
	}
	if g.Data.IsOnline() {
		if err := opened(nil); err != nil {
			return err
		}
		r.norm = saved
		if opt.Comm == nil { // a local run's position is its newest checkpoint's
			c, err := opt.Checkpoint.ResumeStep(-1)
			if err != nil {
				return err
			}
			if err := r.openOnline(max(int(c), 0), opt.Checkpoint, c); err != nil {
				return err
			}
		}
	} else if g.Data.Stream {
		var f *data.FileStream
		if saved != nil {
			f, err = data.OpenStreamScaled(g.Data, saved)
		} else {
			f, err = data.OpenStreamProgress(g.Data, r.progress())
		}
		if err := opened(err); err != nil {
			return err
		}
		r.closers = append(r.closers, func() { f.Close() })
		r.file, r.stream, r.norm = f, f, f.Scaling()
	} else {
		sp, err := data.LoadSplitProgress(g.Data, saved, r.progress())
		if err := opened(err); err != nil {
			return err
		}
		r.set, r.stream, r.norm, r.held.Set = sp.Train, data.NewStream(sp.Train), sp.Norm, sp.Eval
	}
	rows := func() (int64, error) { return data.Rows(g.Data) }
	if r.set != nil {
		rows = func() (int64, error) { return int64(r.set.Rows), nil }
	}
	if r.steps, err = StepsOf(g, opt.Steps, r.batch, r.n, rows); err != nil {
		return err
	}
	// Who evaluates the held-out data: a local run, and trainer 0 of a
	// split job, with the parameters it received (and, in a job with
	// lookup tables, the rows each chunk looks up, pulled from the
	// pservers).
	r.tables = opt.Comm != nil && dsl.HasTables(g)
	r.evaluates = g.Data.Eval != nil && (opt.Comm == nil || opt.TrainerIndex == 0)
	if r.tables && opt.Save != "" && opt.TrainerIndex != 0 {
		opt.Log.Warn().Str("file", opt.Save).Msg("--save: in a job with lookup tables trainer 0 saves the whole model; this trainer saves its dense parameters only")
	}
	if r.evaluates && (g.Data.Stream || g.Data.IsOnline()) {
		f, err := evaluate.OpenHeldOut(g, r.norm)
		if err != nil {
			return err
		}
		r.closers = append(r.closers, func() { f.Close() })
		r.held.File = f
	}
	return nil
}

// node is the trainer's place in its job (a local run's: outside one).
func (r *run) node() kernels.Node {
	n := kernels.Node{Trainer: r.opt.TrainerIndex, Trainers: r.n}
	if r.opt.Comm != nil {
		n.Role = ir.TrainerRole
	}
	return n
}

// compile compiles the training program, gives it its initial values,
// and prepares the metrics file and the held-out evaluator.
func (r *run) compile() error {
	g, opt := r.g, r.opt
	var pin []string
	if r.evaluates && opt.Comm != nil {
		pin = opt.Params // the received parameters, which evaluation reads
	}
	prog, err := program.Compile(g, program.CompileOptions{Batch: r.batch, Pin: pin, Node: r.node()})
	if err != nil {
		return err
	}
	r.prog = prog
	r.closers = append(r.closers, prog.Close)
	if len(prog.Lowered) > 0 {
		opt.Prom.WatchTables(func() []metrics.TableStats { return tableStats(prog) })
	}
	// A distributed trainer's file is a whole model: it reads the
	// variables it holds and leaves the others to the pservers.
	init := program.InitOptions{From: opt.InitFrom, Progress: r.progress()}
	if opt.Comm != nil {
		held := program.PersistentOf(prog)
		init.Partial, init.Select = true, func(name string) bool { return held[name] != nil }
	}
	if err := program.Init(prog, init); err != nil {
		return err
	}
	prog.OnError = func(error) { r.cancel() }
	r.feed = program.NewFeeder(g, prog.Scope)
	r.rt = &program.Runtime{Ctx: r.ctx}
	if opt.Comm != nil {
		r.rt.RV = opt.Comm
	}
	if opt.Metrics != "" {
		f, err := os.Create(opt.Metrics)
		if err != nil {
			return fmt.Errorf("cannot write metrics: %w", err)
		}
		r.metrics = bufio.NewWriter(f)
		r.closers = append(r.closers, func() { f.Close() }, func() { r.metrics.Flush() })
	}
	// A trainer of a job with lookup tables holds only the rows it fetched,
	// so it cannot evaluate the whole data set at the end, and a run over a
	// streamed file does so only when asked (--final-pass): the summary
	// has the mean loss and metrics of the last steps instead.
	if r.tables && opt.FinalPass == FinalPassOn {
		opt.Log.Warn().Msg("--final-pass: a trainer of a job with lookup tables holds only the table rows it fetched, so its summary is the mean of its last 100 steps")
	}
	if r.tables || opt.FinalPass == FinalPassOff || opt.FinalPass == FinalPassAuto && r.set == nil {
		r.tail = newWindow(g, tailSteps*r.batch, r.batch)
	}
	if g.Data.IsOnline() { // the progressive validation's window instead
		r.tail = nil
	}
	if !r.evaluates {
		return nil
	}
	// The held-out evaluator shares the parameters of the training program:
	// a local run's own, a trainer's received ones (the values it computed
	// its last step with, one update behind the pservers).
	shared := program.Scope{}
	names := g.ModelVars() // the model's state too: batch_norm's statistics
	if opt.Comm != nil {
		names = append(append([]string{}, opt.Params...), g.ModelState()...)
	}
	for _, name := range names {
		if t := prog.Scope[name]; t != nil {
			shared[name] = t
		}
	}
	var rv kernels.Rendezvous // the evaluation's table pulls
	if r.tables {
		tables, err := tablesOf(g, r.batch, opt.Transfers)
		if err != nil {
			return err
		}
		r.pulls = newPullRendezvous(opt.Comm, tables)
		rv = r.pulls
	}
	if r.ev, err = evaluate.NewEvaluatorTables(g, r.held.Set, r.held.File, shared, r.prog.Tables, rv, max(r.batch, evaluate.EvalChunk)); err != nil {
		return err
	}
	r.ev.ReportTo(r.progress(), "evaluating the held-out data")
	r.closers = append(r.closers, r.ev.Close)
	return nil
}

// startStep finds the run's first step: a trainer's from the pservers
// (StartStep, or learned from their parameters), a local run's from its
// newest checkpoint.
func (r *run) startStep() error {
	opt := r.opt
	r.first = opt.StartStep
	if r.first < 0 { // learn it from the pservers' first parameter messages
		r.first = 0
		if opt.Comm != nil {
			k, err := opt.Comm.LearnStep(r.ctx)
			if err != nil {
				return err
			}
			r.first = int(k)
			if k > 0 {
				opt.Log.Info().Int64("step", k).Msg("joining at the pservers' step")
			}
		}
	}
	// An online run's progressive validation window comes back from the
	// checkpoint it resumes from, with the model state.
	var win *window
	var kept map[string]*tensor.Tensor
	if r.g.Data.IsOnline() {
		win = newWindow(r.g, r.g.Data.Online.Window, r.batch)
		kept = win.kept
	}
	var got map[string]bool
	if opt.Comm != nil {
		r.own = newTrainerState(r)
		if opt.State != nil {
			r.served = servedState(r.g, r.prog)
		}
	}
	ckStep := int64(-1)
	if opt.Comm != nil && r.first > 0 {
		var err error
		if ckStep, got, err = r.own.restore(r.first, kept, opt.Log); err != nil {
			return err
		}
	}
	if opt.Comm != nil && r.g.Data.IsOnline() {
		if err := r.openOnline(r.first, r.own.checkpointer(), ckStep); err != nil {
			return err
		}
	}
	if ck := opt.Checkpoint; ck != nil && opt.Comm == nil {
		ck.Prom = opt.Prom
		ck.Meta = modelfile.NormMeta(r.norm) // a resumed run takes them back (openData)
		c, err := ck.ResumeStep(-1)
		if err != nil {
			return err
		}
		if c >= 0 {
			if got, err = ck.RestoreOptional(c, program.PersistentOf(r.prog), kept); err != nil {
				return err
			}
			if err := restoreChains(ck, r.prog, c); err != nil {
				return err
			}
			r.first = int(c)
			opt.Log.Info().Int64("step", c).Str("dir", ck.Dir).Msg("resumed from checkpoint")
		}
	}
	if r.first > r.steps && (r.steps > 0 || r.on == nil) {
		return fmt.Errorf("the run resumes at step %d, after its last step %d; raise --steps", r.first, r.steps)
	}
	if r.on != nil {
		r.on.win = win
		r.on.prom = opt.Prom.WatchStream(win.names)
		if got != nil {
			ok, err := win.restored(got)
			if err != nil {
				return err
			}
			if ok {
				opt.Log.Info().Int("rows", win.rows()).Msg("the progressive validation window goes on from the checkpoint")
			} else {
				opt.Log.Info().Msg("the progressive validation window starts empty: the checkpoint holds none of this metrics_window and batch")
			}
		}
	}
	return nil
}

// loop runs the steps from r.first: to the run's last step, or, for an
// online source without one, until the source ends or the run is asked
// to stop (then r.steps becomes the steps done).
func (r *run) loop(start time.Time) error {
	opt := r.opt
	logEvery := opt.LogEvery
	if logEvery <= 0 && r.steps > 0 {
		logEvery = max(1, r.steps/10)
	}
	lg := stepLog{last: start, lastStep: r.first, start: start}
	opt.Prom.SetReady(true)
	stepStart := start
	saved, logged := int64(r.first), r.first
	if r.on != nil {
		r.halt.Started(int64(r.first))
	}
	for k := r.first; r.steps == 0 || k < r.steps; k++ {
		if err := r.step(k); err != nil {
			if errors.Is(err, errStepsEnded) {
				r.steps = k
				break
			}
			return err
		}
		if r.served != nil {
			opt.State.Offer(int64(k+1), r.served)
		}
		now := time.Now()
		if opt.Prom != nil {
			opt.Prom.Step(now.Sub(stepStart))
			stepStart = now
		}
		if r.tail != nil && k >= r.steps-tailSteps {
			if err := r.tail.add(r.prog.Scope); err != nil {
				return err
			}
		}
		if r.on != nil {
			if err := r.on.stepped(r.prog.Scope); err != nil {
				return err
			}
		}
		last := k == r.steps-1
		// Every ck.Every steps, and at the last step: a finished run can be
		// continued from where it ended.
		if ck := opt.Checkpoint; ck != nil && ck.Every > 0 && ((k+1)%ck.Every == 0 || last) {
			if err := r.checkpoint(int64(k + 1)); err != nil {
				return err
			}
			saved = int64(k + 1)
		}
		// Step 1 is logged too, so a loss curve starts where training does.
		due := (k+1)%max(logEvery, 1) == 0
		if r.on != nil {
			due = r.on.due(k, logEvery, now)
		}
		if due || last || k == 0 {
			if err := r.logStep(&lg, k); err != nil {
				return err
			}
			logged = k + 1
		}
		if r.ev != nil && r.g.Train.EvalEvery > 0 && (k+1)%r.g.Train.EvalEvery == 0 && !last {
			if r.pulls != nil { // the rows as of this step (pull.go)
				r.pulls.at, r.pulls.final = int64(k+1), false
			}
			if _, err := logEval(r.ctx, r.ev, k+1, r.g, opt, r.metrics); err != nil {
				return err
			}
		}
		if last {
			break
		}
	}
	if r.on != nil {
		r.halt.Ended(int64(r.steps))
		if logged < r.steps { // the last step, whose line was not due
			if err := r.logStep(&lg, r.steps-1); err != nil {
				return err
			}
		}
		r.on.describeEnd(opt.Log, r.steps)
		// The steps ended between two checkpoints: save the last one.
		if ck := opt.Checkpoint; ck != nil && ck.Every > 0 && saved < int64(r.steps) {
			if err := r.checkpoint(int64(r.steps)); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkpoint saves the node's checkpoint of step: a local run's
// parameters, optimizer state and dynamic tables, a trainer's own state;
// with an online source, the stream's position after the rows the steps
// trained on, in the same file.
func (r *run) checkpoint(step int64) error {
	ck := r.opt.Checkpoint
	if r.opt.Comm != nil {
		ck = r.own.checkpointer()
	}
	var kept map[string]*tensor.Tensor
	if r.on != nil && ck != nil {
		if ck.Meta == nil {
			ck.Meta = map[string]string{}
		}
		ck.Meta[StreamMeta] = r.on.reader.Position().Marshal()
		maps.Copy(ck.Meta, modelfile.NormMeta(r.norm))
		kept = r.on.win.keep()
	}
	if r.opt.Comm != nil {
		return r.own.save(step, kept)
	}
	if err := saveChains(ck, r.prog, step); err != nil {
		return err
	}
	ts := program.PersistentOf(r.prog)
	maps.Copy(ts, kept)
	return ck.Save(step, ts)
}

// step feeds and runs step k.
func (r *run) step(k int) error {
	if err := r.ctx.Err(); err != nil {
		return err
	}
	if r.on != nil {
		if err := r.on.fill(r, k); err != nil {
			return err
		}
	} else if err := r.feed.Fill(r.stream, int64(k)*int64(r.n*r.batch)+int64(r.opt.TrainerIndex*r.batch)); err != nil {
		return err
	}
	r.rt.StepNum = int64(k)
	if r.opt.Comm != nil {
		if err := r.opt.Comm.Flush(r.ctx); err != nil {
			return err
		}
	}
	return r.prog.Run(r.rt)
}

// stepLog is the rate of the steps since the last logged one.
type stepLog struct {
	start, last time.Time
	lastStep    int
}

// logStep logs step k (its loss, metrics, rate and progress) and writes
// it to the metrics file; a NaN loss stops the run.
func (r *run) logStep(lg *stepLog, k int) error {
	g, s := r.g, r.prog.Scope
	loss := float64(s[g.Train.Loss].F[0])
	now := time.Now()
	sps := float64(k+1-lg.lastStep) / now.Sub(lg.last).Seconds()
	lg.last, lg.lastStep = now, k+1
	ev := r.opt.Log.Info().Int("step", k+1).Float64("loss", loss)
	for _, m := range g.Train.Metrics {
		ev = ev.Float64(m, float64(s[m].F[0]))
	}
	ev = ev.Float64("steps_per_s", math.Round(sps))
	var more func(*bufio.Writer)
	if r.on != nil {
		ev, more = r.on.progress(ev, r.on.win.names)
	}
	if r.metrics != nil {
		writeMetrics(r.metrics, k+1, g, s, sps, r.opt.Role, more)
	}
	// Progress: of the run's steps, done, and the time left at the
	// run's rate so far.
	if r.steps > 0 {
		eta := time.Duration(float64(now.Sub(lg.start)) / float64(k+1-r.first) * float64(r.steps-k-1))
		ev = ev.Int("of", r.steps).Int("pct", 100*(k+1)/r.steps).Str("eta", eta.Round(time.Second).String())
	}
	ev.Msg("train")
	if math.IsNaN(loss) {
		return fmt.Errorf("step %d: the loss is NaN; lower the learning rate or check the data normalization", k+1)
	}
	return nil
}

// end finishes the run: a trainer receives the final parameters; the
// parameters are saved (trainer 0 of a job with tables pulls every table
// into the file) and the held-out data evaluated; a trainer then
// finishes with its pservers (which serve its pulls until then); the
// summary gets the loss and metrics over the data set.
func (r *run) end(elapsed float64) (*Summary, error) {
	g, opt := r.g, r.opt
	reportTruncated(opt.Log, r.set, r.file)
	params, names := program.Scope{}, g.ModelVars()
	for _, name := range names {
		params[name] = r.prog.Scope[name]
	}
	if opt.Comm != nil && len(opt.Params) > 0 {
		if err := r.receiveFinal(params); err != nil {
			return nil, err
		}
	}
	if opt.Comm != nil {
		names = append(names, opt.Params...)
	}
	if opt.Save != "" {
		names, local, err := tableEntries(r.prog, names)
		if err != nil {
			return nil, err
		}
		if err := r.save(names, params, local); err != nil {
			return nil, err
		}
		opt.Log.Info().Str("file", opt.Save).Msg("saved parameters")
	}
	sum := &Summary{Role: opt.Role, Steps: r.steps, Seconds: elapsed, StepsPerS: float64(r.steps-r.first) / elapsed, Metrics: map[string]float64{}, order: g.Train.Metrics,
		Tables: tableStats(r.prog)}
	if r.ev != nil {
		if r.pulls != nil { // the rows of the job's end
			r.pulls.at, r.pulls.final = int64(r.steps), true
		}
		vals, err := logEval(r.ctx, r.ev, r.steps, g, opt, r.metrics)
		if err != nil {
			return nil, err
		}
		sum.EvalRows = r.ev.Rows
		sum.Note = r.batchNote(r.ev)
		sum.Eval = map[string]float64{"eval_loss": vals[0]}
		for i, m := range g.Train.Metrics {
			sum.Eval["eval_"+m] = vals[i+1]
		}
	}
	if opt.Comm != nil {
		if err := r.finish(sum); err != nil {
			return nil, err
		}
	}
	if r.on != nil {
		r.on.fillSummary(sum, r.on.win.names)
		return sum, nil
	}
	if r.tail != nil {
		vals := r.tail.values()
		sum.Loss = vals[0]
		for i, m := range g.Train.Metrics {
			sum.Metrics[m] = vals[i+1]
		}
		return sum, nil
	}
	// The pass over the whole training data (--final-pass).
	ev, err := evaluate.NewEvaluatorTables(g, r.set, r.file, params, r.prog.Tables, nil, max(r.batch, evaluate.EvalChunk))
	if err != nil {
		return nil, err
	}
	defer ev.Close()
	ev.ReportTo(r.progress(), "evaluating the training data")
	vals, err := ev.Run(r.ctx)
	if err != nil {
		return nil, err
	}
	if sum.Note == "" {
		sum.Note = r.batchNote(ev)
	}
	sum.Loss = vals[0]
	for i, m := range g.Train.Metrics {
		sum.Metrics[m] = vals[i+1]
	}
	return sum, nil
}

// batchNote is evaluate.BatchNote of an evaluation by ev, logged as a
// warning when there is one.
func (r *run) batchNote(ev *evaluate.Evaluator) string {
	note := evaluate.BatchNote(r.g, ev.Chunk(), r.batch)
	if note != "" {
		r.opt.Log.Warn().Msg(note)
	}
	return note
}

// finish tells the pservers this trainer is done, waits until they are,
// and puts the traffic into the summary.
func (r *run) finish(sum *Summary) error {
	c := r.opt.Comm
	if err := c.Finish(r.ctx); err != nil {
		return err
	}
	for _, err := range c.AwaitPeers(r.ctx) {
		r.opt.Log.Warn().Err(err).Msg("after the last step")
	}
	tr := c.Traffic() // the pservers are done: nothing more arrives
	sum.SentBytes, sum.RecvBytes, sum.WireSentBytes, sum.WireRecvBytes = tr.Sent, tr.Recv, tr.WireSent, tr.WireRecv
	return nil
}

// save writes the named parameters and the program's own dynamic tables
// (local) to --save; in a job with tables (only trainer 0 saves there)
// with every table whole, pulled from the pservers as of the job's end
// while the file is written.
func (r *run) save(names []string, params program.Scope, local []modelfile.Entry) error {
	g, opt := r.g, r.opt
	if !r.tables || opt.TrainerIndex != 0 {
		return modelfile.SaveModelStreamed(opt.Save, g.Name, int64(r.steps), names, params, r.norm, local)
	}
	tables, err := tablesOf(g, r.batch, opt.Transfers)
	if err != nil {
		return err
	}
	more := local
	var bytes int64
	for _, t := range tables {
		if t.dynamic {
			es, n, err := dynamicEntries(r.ctx, opt.Comm, t, int64(r.steps))
			if err != nil {
				return err
			}
			more = append(more, es...)
			bytes += int64(n) * int64(8+4*t.width)
			continue
		}
		more = append(more, tableEntry(r.ctx, opt.Comm, t, int64(r.steps)))
		bytes += 4 * int64(t.rows) * int64(t.width)
	}
	opt.Log.Info().Int("tables", len(tables)).Int64("table_bytes", bytes).Str("file", opt.Save).Msg("saving the whole model: pulling the tables from the pservers")
	start := time.Now()
	if err := modelfile.SaveModelStreamed(opt.Save, g.Name, int64(r.steps), names, params, r.norm, more); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	opt.Log.Info().Float64("seconds", math.Round(secs*100)/100).Float64("mb_per_s", math.Round(float64(bytes)/1e6/secs)).Msg("pulled the tables into the file")
	return nil
}

// receiveFinal runs the recvs of the parameters the pservers serve (a
// program compiled for them alone: with no target, Compile would compile
// the whole step, and running it would send the pservers one more step's
// gradients).
func (r *run) receiveFinal(params program.Scope) error {
	opt := r.opt
	fin, err := program.Compile(r.g, program.CompileOptions{Batch: r.batch, Targets: opt.Params, Node: r.node()})
	if err != nil {
		return err
	}
	r.closers = append(r.closers, fin.Close)
	fin.OnError = r.prog.OnError
	r.rt.StepNum = int64(r.steps)
	if err := fin.Run(r.rt); err != nil {
		return fmt.Errorf("receiving the final parameters: %w", err)
	}
	for _, name := range opt.Params {
		params[name] = fin.Scope[name]
		if t := r.prog.Scope[name]; r.ev != nil && t != nil {
			t.CopyFrom(fin.Scope[name]) // the evaluator reads these
		}
	}
	return nil
}

// StepsOf is the number of steps a run trains: steps (--steps) when
// positive, else the model's train.steps, else train.epochs passes over
// the data set's rows by all trainers: ceil(epochs x rows / (batch x
// trainers)), so that every row is read epochs times and the last step
// may run into the next pass (TestEpochsSetSteps). rows is called only
// for epochs. An online source may have no last step (0: until it ends
// or the run is stopped).
func StepsOf(g *dsl.Graph, steps, batch, trainers int, rows func() (int64, error)) (int, error) {
	switch {
	case steps > 0:
		return steps, nil
	case g.Train.Steps > 0:
		return g.Train.Steps, nil
	case g.Data != nil && g.Data.IsOnline():
		return 0, nil
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
// its summary's loss and metrics over: the mean of their batch values, and
// an auc over all their rows at once (a batch of one class, whose AUC is
// NaN, does not make the summary's NaN).
const tailSteps = 100

// writeMetrics writes a step's line of the metrics file; more (nil:
// none) writes more fields into it.
func writeMetrics(w *bufio.Writer, step int, g *dsl.Graph, s program.Scope, sps float64, role string, more func(*bufio.Writer)) {
	fmt.Fprintf(w, `{"step":%d,"role":%q,"loss":%s`, step, role, evaluate.JSONNum(float64(s[g.Train.Loss].F[0])))
	for _, m := range g.Train.Metrics {
		k, _ := json.Marshal(m)
		fmt.Fprintf(w, ",%s:%s", k, evaluate.JSONNum(float64(s[m].F[0])))
	}
	fmt.Fprintf(w, `,"steps_per_s":%s`, evaluate.JSONNum(sps))
	if more != nil {
		more(w)
	}
	w.WriteString("}\n")
}

// logEval evaluates the held-out data after step, logs the result and
// writes it to the metrics file as eval_loss and eval_<metric>. The
// values it returns are valid until the next evaluation.
func logEval(ctx context.Context, ev *evaluate.Evaluator, step int, g *dsl.Graph, opt RunOptions, w *bufio.Writer) ([]float64, error) {
	vals, err := ev.Run(ctx)
	if err != nil {
		return nil, fmt.Errorf("evaluating the held-out data after step %d: %w", step, err)
	}
	e := opt.Log.Info().Int("step", step).Float64("eval_loss", vals[0])
	for i, m := range g.Train.Metrics {
		e = e.Float64("eval_"+m, vals[i+1])
	}
	e.Int("rows", ev.Rows).Msg("eval")
	if w != nil {
		fmt.Fprintf(w, `{"step":%d,"role":%q,"eval_loss":%s`, step, opt.Role, evaluate.JSONNum(vals[0]))
		for i, m := range g.Train.Metrics {
			k, _ := json.Marshal("eval_" + m)
			fmt.Fprintf(w, ",%s:%s", k, evaluate.JSONNum(vals[i+1]))
		}
		w.WriteString("}\n")
	}
	return vals, nil
}
