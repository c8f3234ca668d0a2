// Package node runs one node of a split job, a pserver or a trainer, from
// options: it reads the plan, gives the transport the job's wire identity,
// token and TLS, listens (pserver) or dials (trainer), and runs the role
// with exec. `psgraph run --role pserver|trainer` parses its flags into
// Options and calls Run; `psgraph train --in-process` calls InProcess,
// which runs every node of a job in this process over the in-memory
// transport.
package node

import (
	"context"
	"fmt"
	"time"

	"github.com/psgraph/psgraph/exec/job"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/pserver"
	"github.com/psgraph/psgraph/exec/trainer"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
)

// Options configure one node. They mirror the flags of `psgraph run`,
// which the errors name.
type Options struct {
	Role  string // "pserver" or "trainer"
	Index int    // this node's index among its role
	Plan  string // the directory 'psgraph split' wrote

	Listen   string   // pserver: host:port (default: the plan's endpoint)
	PServers []string // trainer: every pserver's host:port (default: the plan's endpoints)
	Token    string   // the job's shared secret; empty is allowed on loopback only
	Insecure bool     // pserver: listen on a non-loopback address without a token
	// TLSCert, TLSKey and TLSCA are PEM files; all empty: no TLS (TLS).
	TLSCert, TLSKey, TLSCA string
	ConnectTimeout         time.Duration // trainer: how long to retry reaching a pserver
	TrainerTimeout         time.Duration // pserver: how long to wait for a lost trainer
	HandshakeTimeout       time.Duration // how long a new connection has for the handshake (0: 10 s)

	Steps    int    // trainer: 0: the model's train.steps
	Batch    int    // trainer: 0: the plan's batch
	InitFrom string // pserver: initial parameters (safetensors)
	Save     string // trainer: the final parameters; pserver: its table shards
	Metrics  string // trainer: JSON-lines progress file
	LogEvery int
	Log      zerolog.Logger
	// FinalPass: trainer: whether the summary evaluates the whole data
	// after the last step (--final-pass).
	FinalPass trainer.FinalPass
	// Prom receives the node's metrics (nil: none; exec/metrics).
	Prom *metrics.Node

	CheckpointDir   string // pserver; a trainer of a model with state of its own
	CheckpointEvery int    // pserver: 0: never
	ResumeStep      int64  // pserver: < 0: the newest checkpoint
	StartStep       int    // trainer: < 0: learn it from the pservers
	// Stop, closed, asks the node to stop (SIGTERM, SIGINT). A job reading
	// an online source then stops as a whole at a step its trainers agree
	// on, each node checkpointing it and ending as a finished job does
	// (docs/streaming.md); any other job's node ends at once, as if ctx
	// ended.
	Stop <-chan struct{}

	// endpoint, when set, is the node's endpoint, already accepting its
	// transfers (InProcess: the in-memory transport's), instead of one
	// listening or dialing at the addresses.
	endpoint transport.Endpoint
}

// UsageError is an option the caller got wrong (psgraph exits 2 on it).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// Run runs the node until its job is done and returns its summary, the
// JSON object `psgraph run` prints: an *exec.ServeSummary for a pserver,
// an *exec.Summary for a trainer.
func Run(ctx context.Context, o Options) (any, error) {
	if o.Role != "pserver" && o.Role != "trainer" {
		return nil, usagef("--role %q is not a node of a split job; use trainer or pserver", o.Role)
	}
	if o.Plan == "" {
		return nil, usagef("run --role %s needs --plan DIR, the directory 'psgraph split' wrote", o.Role)
	}
	plan, err := partition.ReadPlan(o.Plan)
	if err != nil {
		return nil, err
	}
	count := plan.Info.Trainers
	if o.Role == "pserver" {
		count = plan.Info.PServers
	}
	if o.Index < 0 || o.Index >= count {
		return nil, usagef("run --role %s needs --index between 0 and %d (the plan has %d %ss)", o.Role, count-1, count, o.Role)
	}
	if o.Stop != nil && !plan.Trainer.Data.IsOnline() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func(stop <-chan struct{}) {
			select {
			case <-stop:
				cancel()
			case <-ctx.Done():
			}
		}(o.Stop)
		o.Stop = nil // read by the goroutine above as its argument, not after this
	}
	if o.Role == "pserver" {
		sum, err := runPServer(ctx, plan, o)
		if err != nil {
			return nil, err
		}
		return sum, nil
	}
	sum, err := runTrainer(ctx, plan, o)
	if err != nil {
		return nil, err
	}
	return sum, nil
}

// Name is the node's name in logs and checkpoints: "pserver-0", "trainer-1".
func (o *Options) Name() string { return fmt.Sprintf("%s-%d", o.Role, o.Index) }

func runPServer(ctx context.Context, plan *partition.Plan, o Options) (*pserver.ServeSummary, error) {
	if o.Metrics != "" || o.Steps != 0 || o.Batch != 0 {
		return nil, usagef("--metrics, --steps and --batch are trainer flags; a pserver serves until its trainers are done")
	}
	if o.Save != "" && !plan.Info.HasFixedTables() {
		if plan.Info.HasTables() {
			return nil, usagef("--save on a pserver writes its shards of the plan's fixed lookup tables, and this plan shards only dynamic tables, whose rows trainer 0's --save pulls into the whole model; give --save to trainer 0")
		}
		return nil, usagef("--save on a pserver writes its shards of the plan's lookup tables, and this plan has none; give --save to trainer 0")
	}
	job := jobOf(plan)
	ep := o.endpoint
	var pub *pserver.Publisher
	if ep == nil {
		addr := o.Listen
		if addr == "" && o.Index < len(plan.Info.Endpoints) {
			addr = plan.Info.Endpoints[o.Index]
		}
		if addr == "" {
			return nil, usagef("run --role pserver needs --listen HOST:PORT (or endpoints in the plan: split --pserver-endpoints)")
		}
		tc, err := tlsConfig(o.TLSCert, o.TLSKey, o.TLSCA, true)
		if err != nil {
			return nil, err
		}
		// Serving replicas (psgraph serve --plan) subscribe to the
		// parameters; they authenticate with the job's token like the
		// trainers.
		pub = pserver.NewPublisher(o.Log)
		if ep, err = listen(ctx, plan, job, o.Index, addr, o.Token, o.Insecure, tc, pub.Handle, o.HandshakeTimeout, o.Log); err != nil {
			return nil, err
		}
		defer ep.Close()
	}
	ck, err := Checkpointer(o.CheckpointDir, o.CheckpointEvery, o.Name(), plan.Info.Model)
	if err != nil {
		return nil, err
	}
	return job.RunPServer(ctx, o.Index, ep, pserver.ServeOptions{InitFrom: o.InitFrom, Log: o.Log, LogEvery: o.LogEvery, Checkpoint: ck, ResumeStep: o.ResumeStep, TrainerTimeout: o.TrainerTimeout, Save: o.Save, Prom: o.Prom, Publisher: pub, Stop: o.Stop})
}

func runTrainer(ctx context.Context, plan *partition.Plan, o Options) (*trainer.Summary, error) {
	// A trainer holds no parameters unless one is placed on it; it holds
	// the model's own state (batch_norm's running statistics), when the
	// model has some, and reads what it holds from --init-from and
	// checkpoints it (docs/split.md).
	held := plan.Trainer.Persistent()
	if o.InitFrom != "" && len(held) == 0 && !plan.Trainer.Normalizes() {
		return nil, usagef("--init-from is a pserver flag: pservers hold the parameters and serve them to the trainers (a trainer reads from it only what it holds, such as batch_norm's running statistics, and the normalization statistics, and this plan's trainer needs neither)")
	}
	if (o.CheckpointDir != "" || o.CheckpointEvery != 0) && len(held) == 0 && !plan.Trainer.Data.IsOnline() {
		return nil, usagef("--checkpoint-dir is a pserver flag: the pservers hold the job's state; restart trainers with --start-step (a trainer checkpoints only what it holds, such as batch_norm's running statistics, and this plan's trainer holds nothing)")
	}
	ck, err := Checkpointer(o.CheckpointDir, o.CheckpointEvery, o.Name(), plan.Info.Model)
	if err != nil {
		return nil, err
	}
	addrs := plan.Info.Endpoints
	if len(o.PServers) > 0 {
		addrs = o.PServers
	}
	if len(addrs) != plan.Info.PServers && o.endpoint == nil {
		return nil, usagef("run --role trainer needs --pserver-endpoints with %d host:port entries (one per pserver of the plan), got %d", plan.Info.PServers, len(addrs))
	}
	batch := o.Batch
	if batch == 0 {
		batch = plan.Trainer.Batch()
	} else if batch != plan.Trainer.Train.Batch {
		plan.Trainer.Train.Batch = batch
		if err := plan.Trainer.Check(); err != nil {
			return nil, fmt.Errorf("with --batch %d: %w", batch, err)
		}
	}
	tc, err := tlsConfig(o.TLSCert, o.TLSKey, o.TLSCA, false)
	if err != nil {
		return nil, err
	}
	job := jobOf(plan)
	ep := o.endpoint
	if ep == nil {
		if ep, err = dial(ctx, plan, job, o.Index, addrs, batch, o.Token, o.ConnectTimeout, tc, o.HandshakeTimeout, o.Log); err != nil {
			return nil, err
		}
		defer ep.Close()
	}
	opt := trainer.RunOptions{
		Steps: o.Steps, Batch: batch, Save: o.Save, Metrics: o.Metrics, LogEvery: o.LogEvery, Log: o.Log, StartStep: o.StartStep, Prom: o.Prom, FinalPass: o.FinalPass,
		PServerTimeout: o.ConnectTimeout, InitFrom: o.InitFrom, Checkpoint: ck, Stop: o.Stop,
	}
	if o.Index == 0 && len(held) > 0 && o.endpoint == nil {
		// The serving replicas that follow the job get the state trainer 0
		// holds through pserver 0 (statepush.go).
		push := newStatePusher(o.Token, plan.JobHash(), tc, addrs[0], o.Log)
		pctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { push.run(pctx); close(done) }()
		defer func() { stop(); <-done }()
		opt.State = push
	}
	return job.RunTrainer(ctx, o.Index, ep, opt)
}

// Checkpointer is the checkpointer of --checkpoint-dir and
// --checkpoint-every for the named node (nil: no checkpoints).
func Checkpointer(dir string, every int, node, model string) (*modelfile.Checkpointer, error) {
	if every < 0 {
		return nil, usagef("--checkpoint-every must be 0 (never) or a number of steps, got %d", every)
	}
	if dir == "" {
		if every > 0 {
			return nil, usagef("--checkpoint-every needs --checkpoint-dir")
		}
		return nil, nil
	}
	return &modelfile.Checkpointer{Dir: dir, Every: every, Node: node, Model: model}, nil
}

// jobOf is the runtime's view of a plan.
func jobOf(p *partition.Plan) *job.Job {
	return &job.Job{Trainer: p.Trainer, PServers: p.PServers, Trainers: p.Info.Trainers, Async: p.Info.Mode == partition.Async,
		Params: p.Info.ServedParams()}
}
