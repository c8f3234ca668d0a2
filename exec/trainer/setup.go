package trainer

import (
	"bufio"
	"fmt"
	"os"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
)

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
		// The next batch is parsed while a step computes (closed before
		// the file: closers run last first).
		r.ahead = data.NewPrefetch(f)
		r.closers = append(r.closers, r.ahead.Close)
		r.file, r.stream, r.norm = f, r.ahead, f.Scaling()
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
