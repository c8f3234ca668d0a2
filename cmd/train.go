package cmd

import (
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/launch"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/node"
	"github.com/psgraph/psgraph/partition"
)

type trainOptions struct {
	split    splitOptions
	steps    int
	batch    int
	initFrom string
	save     string
	metrics  string
	keep     string
	log      logFlags
	ck       checkpointFlags
	final    bool   // --final-pass
	tcp      bool   // --tcp
	serve    string // --serve
	inProc   bool   // --in-process
}

func newTrainCmd() *cobra.Command {
	o := &trainOptions{}
	c := &cobra.Command{
		Use:   "train MODEL.yaml --trainers N --pservers M",
		Short: "Run a whole distributed job on this machine",
		Long: `Train splits the model, gives each pserver a Unix-domain socket in a
private temporary directory (free loopback TCP ports with --tcp), starts
every pserver and trainer as a child process of this binary, prefixes
their log lines with the role, and prints trainer 0's JSON summary last.
If a child fails the others are stopped and train exits non-zero with that
child's error; Ctrl-C stops them all. A job reading an online source stops
instead at a step its trainers agree on: SIGTERM or Ctrl-C is passed on to
every child, each checkpoints that step and ends, and train prints the
summary and exits 0 (a second signal stops everything at once). The children share a freshly
generated token, a share of the cores (GOMAXPROCS) and a GODEBUG that
keeps the Go runtime's sysmon from parking at every idle moment of a
step (docs/runtime.md). With --in-process every pserver and trainer runs
inside this process instead, connected in memory: no sockets, no child
processes, one process to profile or debug (docs/runtime.md).`,
		Example: `  psgraph train examples/digits-mlp.yaml --trainers 2 --pservers 2
  psgraph train examples/digits-mlp.yaml --trainers 2 --pservers 2 --mode async --save digits.safetensors
  psgraph train examples/digits-mlp.yaml --trainers 2 --pservers 2 --in-process`,
		Args: exactArgs(1, "one model file"),
		RunE: func(c *cobra.Command, args []string) error { return o.run(c, args[0]) },
	}
	f := c.Flags()
	o.split.addPlacement(c)
	f.IntVar(&o.steps, "steps", 0, "training steps, at least 1 (default: the model's train.steps or train.epochs)")
	f.IntVar(&o.batch, "batch", 0, "per-trainer batch size (default: the model's train.batch)")
	f.StringVar(&o.initFrom, "init-from", "", "load initial parameters by name from a safetensors file (read by the pservers; the trainers read the model's own state from it, such as batch_norm's running statistics, and the normalization statistics a saved model carries)")
	f.StringVar(&o.save, "save", "", "write the final parameters to a safetensors file (trainer 0)")
	f.StringVar(&o.metrics, "metrics", "", "JSON-lines progress file of trainer 0; trainer i writes NAME.trainer-i.jsonl beside it")
	f.StringVar(&o.keep, "plan-dir", "", "write the plan into this directory and keep it (default: a temporary one); its endpoints are this run's sockets, removed at the end (with --tcp, loopback ports)")
	f.BoolVar(&o.tcp, "tcp", false, "connect the nodes over loopback TCP ports instead of Unix-domain sockets (the path a job across machines takes)")
	f.BoolVar(&o.inProc, "in-process", false, "run every pserver and trainer inside this process, connected in memory, instead of as child processes over sockets (not with --tcp, --serve, --checkpoint-dir or an online data source)")
	f.StringVar(&o.serve, "serve", "", "HOST:PORT: also start a serving replica that follows the job (psgraph serve --plan) and answers inference requests there; it serves the job's last step after the job until train is interrupted; the job's pservers and trainers then run at nice 10, so on a shared machine requests come first")
	addFinalPassFlag(c, &o.final)
	o.log.add(c)
	o.ck.add(c, false)
	return c
}

func (o *trainOptions) run(c *cobra.Command, model string) error {
	if err := o.inProcessFlags(c); err != nil {
		return err
	}
	dir := o.keep
	if dir == "" {
		tmp, err := os.MkdirTemp("", "psgraph-train-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	o.split.out = dir
	opt, err := o.split.options(model)
	if err != nil {
		return err
	}
	if err := checkStepsBatch(c, o.steps, o.batch); err != nil {
		return err
	}
	if _, err := o.log.logger(io.Discard, "train"); err != nil { // --log-format and --log-level, before any child starts
		return err
	}
	g, sum, err := loadForSplit(model)
	if err != nil {
		return err
	}
	if err := g.Trainable(); err != nil {
		return err
	}
	if !g.HasOptimizer() { // generated backward ops, no optimizer
		return dsl.Errorf(g.Train.Pos, "train splits the model, and split needs its train.optimizer; this model holds generated backward ops instead (a subgraph?): run it with psgraph run")
	}
	// The trainers take the file's normalization statistics: a mode the
	// model does not share is refused here, at the user's file, before
	// any child starts.
	if _, err := modelfile.SavedScaling(g, o.initFrom); err != nil {
		return err
	}
	var addrs []string // in one process: none
	if !o.inProc {
		var cleanup func()
		if addrs, cleanup, err = o.endpoints(opt.PServers); err != nil {
			return err
		}
		defer cleanup()
	}
	opt.Endpoints = addrs
	opt.SourceSHA256 = sum
	plan, err := partition.Split(g, opt)
	if err != nil {
		return err
	}
	if err := plan.Write(dir); err != nil {
		return err
	}
	if o.inProc {
		return o.runInProcess(c, plan, dir)
	}
	token, err := launch.NewToken()
	if err != nil {
		return err
	}
	if _, err := o.ck.checkpointer("", g.Name); err != nil {
		return err
	}
	// The trainers hold state of their own (batch_norm's running
	// statistics, a parameter placed on them): they read --init-from and
	// checkpoint it, and a rerun resumes where they have checkpoints too,
	// except in an async job of several trainers, whose pservers count
	// every trainer's steps (the trainers then restore their newest
	// checkpoint before the pservers' step).
	// So do the trainers of an online source: their checkpoints hold the
	// stream's position (docs/streaming.md).
	state := len(plan.Trainer.Persistent()) > 0 || plan.Trainer.Data.IsOnline()
	trainersWithState := 0
	if state && (opt.Mode != partition.Async || opt.Trainers == 1) {
		trainersWithState = opt.Trainers
	}
	resume, err := launch.Resume(o.ck.dir, opt.PServers, trainersWithState)
	if err != nil {
		return err
	}
	if resume > 0 {
		fmt.Fprintf(c.ErrOrStderr(), "resuming from the checkpoints of step %d in %s\n", resume, o.ck.dir)
	}
	_, maxprocsSet := os.LookupEnv("GOMAXPROCS")
	lo := launch.PlanOptions{
		Dir: dir, Endpoints: addrs, Trainers: opt.Trainers, Token: token,
		NumCPU: runtime.NumCPU(), GOMAXPROCSSet: maxprocsSet, GODEBUG: os.Getenv("GODEBUG"),
		Steps: o.steps, Batch: o.batch, InitFrom: o.initFrom, Save: o.save, Metrics: o.metrics,
		LogFormat: o.log.format, LogLevel: o.log.level, LogEvery: o.log.every,
		FinalPass:     finalPassArg(c),
		CheckpointDir: o.ck.dir, CheckpointEvery: o.ck.every, Resume: resume,
		TrainerState: state, TrainerNormalizes: plan.Trainer.Normalizes(),
		Serve: o.serve, Model: model,
	}
	children := launch.Plan(lo)
	fmt.Fprint(c.ErrOrStderr(), plan.Summary())
	report := func(res *launch.Result) {
		fmt.Fprintf(c.ErrOrStderr(), "peak RSS: %s\n", res.PeakRSSLine(children))
		fmt.Fprintln(c.OutOrStdout(), string(res.LastLine("trainer-0")))
	}
	lopt := launch.Options{Log: c.ErrOrStderr()}
	if o.serve != "" {
		lopt.JobDone = func(res *launch.Result) {
			report(res)
			fmt.Fprintf(c.ErrOrStderr(), "the job is done; replica-0 serves its last step at http://%s/v2/models/%s until train is interrupted\n", o.serve, g.Name)
		}
	}
	ctx := c.Context()
	if plan.Trainer.Data.IsOnline() {
		// Asked to stop, the job stops at a step its trainers agree on,
		// checkpoints it and ends: every child gets the signal and ends
		// by itself. A second signal stops them at once.
		ctx, lopt.Stop = hardContext(ctx), ctx.Done()
	}
	res, err := launch.Run(ctx, children, lopt)
	if err != nil {
		return err
	}
	if o.serve == "" {
		report(res)
	}
	return nil
}

// endpoints are the pservers' addresses: Unix-domain sockets in a private
// temporary directory, which move a dense step's bytes for less CPU than
// loopback TCP (transport.BenchmarkDenseStep; docs/wire.md), or with --tcp
// (or where a socket path would be too long) free loopback ports.
func (o *trainOptions) endpoints(n int) ([]string, func(), error) {
	if !o.tcp && runtime.GOOS != "windows" {
		dir, err := os.MkdirTemp("", "psgraph-sock-")
		if err != nil {
			return nil, nil, err
		}
		if addrs := launch.SocketPaths(dir, n); addrs != nil {
			return addrs, func() { os.RemoveAll(dir) }, nil
		}
		os.RemoveAll(dir)
	}
	addrs, err := launch.FreePorts(n)
	return addrs, func() {}, err
}

// inProcessFlags refuses, with --in-process, the flags a job in one
// process cannot honour: each names the flag and what to do instead.
func (o *trainOptions) inProcessFlags(c *cobra.Command) error {
	if !o.inProc {
		return nil
	}
	f := c.Flags()
	switch {
	case o.tcp:
		return usagef("--in-process connects the nodes in memory, and --tcp over loopback TCP: give one of them")
	case o.serve != "":
		return usagef("--serve starts a serving replica that follows the pservers over the network, and --in-process gives them no address: drop --in-process to serve the job")
	case f.Changed("checkpoint-dir") || f.Changed("checkpoint-every"):
		return usagef("--checkpoint-dir and --checkpoint-every resume a job whose processes can be restarted; with --in-process the job lives and dies with this process: drop --in-process to checkpoint")
	}
	return nil
}

// runInProcess is train with --in-process: the plan written in dir (with
// no endpoints) run node by node inside this process (node.InProcess),
// trainer 0's summary printed last.
func (o *trainOptions) runInProcess(c *cobra.Command, plan *partition.Plan, dir string) error {
	fmt.Fprint(c.ErrOrStderr(), plan.Summary())
	w := zerolog.SyncWriter(c.ErrOrStderr()) // the nodes log from their goroutines
	logs := func(name string) zerolog.Logger {
		l, _ := o.log.logger(w, name) // the flags were checked by run
		return l
	}
	s, err := node.InProcess(c.Context(), node.InProcessOptions{
		Plan: dir, Steps: o.steps, Batch: o.batch, InitFrom: o.initFrom, Save: o.save, Metrics: o.metrics,
		LogEvery: o.log.every, FinalPass: finalPass(c), Log: logs,
	})
	if err != nil {
		return err
	}
	return printJSON(c, s)
}
