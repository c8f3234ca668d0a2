package trainer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/progress"
	"github.com/psgraph/psgraph/exec/tensor"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
)

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
	ahead  *data.Prefetch // a streamed file's next batch, parsed during the step (nil: in memory)
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
	if r.ahead != nil {
		r.ahead.Close() // the file is the final pass's from here
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
	} else {
		if err := r.feed.Fill(r.stream, r.startOf(k)); err != nil {
			return err
		}
		if r.ahead != nil && k+1 < r.steps {
			r.ahead.Ahead(r.startOf(k + 1))
		}
	}
	r.rt.StepNum = int64(k)
	if r.opt.Comm != nil {
		if err := r.opt.Comm.Flush(r.ctx); err != nil {
			return err
		}
	}
	return r.prog.Run(r.rt)
}

// startOf is the stream position of this trainer's first row of step k
// (the data stream rule: the trainers take turns by batch).
func (r *run) startOf(k int) int64 {
	return int64(k)*int64(r.n*r.batch) + int64(r.opt.TrainerIndex*r.batch)
}

// tailSteps is how many final steps a trainer with lookup tables averages
// its summary's loss and metrics over: the mean of their batch values, and
// an auc over all their rows at once (a batch of one class, whose AUC is
// NaN, does not make the summary's NaN).
const tailSteps = 100
