package pserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/progress"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/transport"
)

// ServeOptions configures a pserver: the node that holds parameter blocks,
// runs their initializers and optimizer subgraphs, and serves them.
type ServeOptions struct {
	Comm Comm
	// Transfers is the pserver's transfer table (dsl.Graph.Transfers),
	// computed once for the job (job.Job.Transfers).
	Transfers []dsl.Transfer
	InitFrom  string
	Log       zerolog.Logger
	LogEvery  int
	// Workers bounds concurrent compute (0: GOMAXPROCS).
	Workers int
	// Checkpoint saves the node's blocks and optimizer state every Every
	// steps; a pserver whose directory holds a checkpoint resumes from it
	// (ResumeStep when >= 0, else the newest).
	Checkpoint *modelfile.Checkpointer
	ResumeStep int64
	// TrainerTimeout: how long to wait for a lost trainer (sync mode);
	// RunPServer gives it to the pserver's communication.
	TrainerTimeout time.Duration
	// Save, when set, is the file the pserver writes the fixed
	// lookup-table shards it holds to once the trainers are done (T.s<j>,
	// rows in local order); trainer 0's --save is the whole model.
	Save string
	// NoStream runs every part's update as one Program.Run per step, even
	// where a Streamer could apply it as the gradient arrives (streamed
	// and whole steps give bitwise the same result).
	NoStream bool
	// Prom, when set, times each part's steps and records checkpoints for
	// Prometheus (--metrics-addr); RunPServer also counts its traffic per
	// trainer.
	Prom *metrics.Node
	// Stop, closed, asks the job to stop (SIGTERM, SIGINT): in a job
	// reading an online source RunPServer then asks the trainers to stop
	// (comm.PServer.StartHalt) and the pserver serves on until they are
	// done, at the step they agree on; Serve's context stays up.
	Stop <-chan struct{}
	// Publisher, when set, serves the parameters to serving replicas
	// (publish.go; the transport hands it their connections).
	Publisher *Publisher
}

// ServeSummary is a pserver's result.
type ServeSummary struct {
	Role string `json:"role"`
	// First is the step the pserver started at: 0, its restored
	// checkpoint's, or the running job's after a restart.
	First int64 `json:"first_step"`
	// Streamed counts the parts whose update ran as the gradient arrived
	// (Streamer), of Parts.
	Streamed int     `json:"streamed_parts"`
	Parts    int     `json:"parts"`
	Steps    int64   `json:"steps"`
	Seconds  float64 `json:"seconds"`
	// What the pserver's endpoint moved in the job, read once every
	// trainer finished (transport.Traffic; docs/runtime.md).
	SentBytes     int64 `json:"sent_bytes"`
	RecvBytes     int64 `json:"recv_bytes"`
	WireSentBytes int64 `json:"wire_sent_bytes"`
	WireRecvBytes int64 `json:"wire_recv_bytes"`
	// Tables is the state of this pserver's shards of dynamic tables at
	// the end, by table.
	Tables map[string]TableSummary `json:"tables,omitempty"`
}

// Serve runs a pserver's subgraph (its endpoint accepts the graph's
// transfers and the position transfer, declared before it connected) until
// every trainer is done. Before the first step it hears every trainer's
// position and sends each `initial` parameter for the step it starts at
// (0, its checkpoint's, or the running job's after a restart); then each
// part (Components: a parameter block and its optimizer) runs as its own
// loop: accumulate the step's gradient pieces, update, send the next
// step's parameters. It returns when the trainers finished (nil error) or
// on the first failure.
func Serve(parent context.Context, g *dsl.Graph, opt ServeOptions) (*ServeSummary, error) {
	c := opt.Comm
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	parts, err := compileParts(g, opt, cancel)
	defer func() {
		for _, p := range parts {
			p.prog.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	restored, err := restore(parts, opt)
	if err != nil {
		return nil, err
	}
	// Replicas may subscribe from now on: before the trainers come, they
	// get the initial (or restored) parameters.
	opt.Publisher.attach(parts, max(restored, 0))
	defer opt.Publisher.end(0) // a failed pserver: its replicas' subscriptions end
	if len(tableStats(parts)) > 0 {
		opt.Prom.WatchTables(func() []metrics.TableStats { return tableStats(parts) })
	}
	// Every trainer tells this pserver where it is; a fresh job starts at
	// the restored step (0 without a checkpoint), a restart into a running
	// job where the trainers are (rejoin.Gather).
	var params []comm.Initial
	for _, p := range parts {
		params = append(params, p.params...)
	}
	first, err := c.StartServing(ctx, params, restored)
	if err != nil {
		if parent.Err() != nil {
			return nil, parent.Err()
		}
		return nil, c.StopJob(err)
	}
	start := time.Now()
	last, streamed, err := runParts(ctx, cancel, parts, c, opt, first)
	if err != nil {
		if parent.Err() != nil {
			return nil, parent.Err()
		}
		return nil, c.StopJob(err)
	}
	if err := finish(parent, g, parts, c, opt, first, last); err != nil {
		return nil, err
	}
	opt.Publisher.end(10 * time.Second) // the replicas take the last step
	opt.Log.Info().Int64("steps", last).Msg("every trainer is done")
	tr := c.Traffic()
	return &ServeSummary{Role: c.Endpoint().Self().String(), First: first, Steps: last, Seconds: time.Since(start).Seconds(),
		Streamed: streamed, Parts: len(parts),
		SentBytes: tr.Sent, RecvBytes: tr.Recv, WireSentBytes: tr.WireSent, WireRecvBytes: tr.WireRecv, Tables: tableSummaries(parts)}, nil
}

// part is one loop of a pserver: a parameter block's update, compiled,
// and the parameters it serves (its sends with an `initial` value).
type part struct {
	prog   *program.Program
	params []comm.Initial
	// step is the step the loop reached when it stopped.
	step int64
	// rv is the part's rendezvous (runParts makes it); applied how far
	// its loop is, commit the lock of its assigns, for pulls of a table
	// shard it holds (pull.go).
	rv      *comm.Part
	applied stepsApplied
	commit  sync.RWMutex
	// cuts orders the cuts of the part's dynamic shards (one open at a
	// time): its checkpoints' and the export a pull at the end reads.
	cuts sync.Mutex
}

// saveTables cuts the part's dynamic shards into their checkpoint chains
// at step (between steps, on its loop).
func (p *part) saveTables(ck *modelfile.Checkpointer, step int64) error {
	if len(p.prog.Tables) == 0 {
		return nil
	}
	p.cuts.Lock()
	defer p.cuts.Unlock()
	return ck.SaveTables(step, p.prog.Tables)
}

// compileParts compiles each part of the pserver's graph and gives its
// persistent variables their initial values. A part whose op fails
// cancels the pserver (but a trainer finishing is not a failure).
func compileParts(g *dsl.Graph, opt ServeOptions, cancel context.CancelFunc) ([]*part, error) {
	var parts []*part
	node := kernels.Node{Role: ir.PServerRole, Trainers: opt.Comm.Trainers(), Async: opt.Comm.Async()}
	for _, pg := range program.Components(g) {
		// A part is one block's update: accumulate, then a short chain of
		// small element-wise ops; running it on its loop's goroutine saves
		// a hand-off per op. Parts run in parallel with each other.
		prog, err := program.Compile(pg, program.CompileOptions{Workers: opt.Workers, Sequential: true, Node: node})
		if err != nil {
			return parts, err
		}
		p := &part{prog: prog}
		parts = append(parts, p)
		if err := program.Init(prog, program.InitOptions{From: opt.InitFrom, Partial: true, Progress: &progress.Reporter{Log: opt.Log}}); err != nil {
			return parts, err
		}
		prog.OnError = func(err error) {
			if !comm.Finished(err) {
				cancel()
			}
		}
		for _, t := range opt.Transfers {
			if t.Kind != dsl.ParamTransfer || t.Recv || t.Initial == "" || !slices.Contains(pg.Ops, t.Op) {
				continue
			}
			x, ok := prog.Scope[t.Initial]
			if !ok {
				return parts, dsl.Errorf(t.Op.Pos, "send: initial %q is not a variable of this node", t.Initial)
			}
			p.params = append(p.params, comm.Initial{Var: t.Var, T: x})
		}
	}
	return parts, nil
}

// restore restores the parts from the pserver's checkpoint, if it has one,
// and returns its step (-1: none).
func restore(parts []*part, opt ServeOptions) (int64, error) {
	if opt.Checkpoint != nil {
		opt.Checkpoint.Prom = opt.Prom
	}
	restored, err := opt.Checkpoint.ResumeStep(opt.ResumeStep)
	if err != nil || restored < 0 {
		return restored, err
	}
	for _, p := range parts {
		if err := opt.Checkpoint.Restore(restored, program.PersistentOf(p.prog)); err != nil {
			return 0, err
		}
		if err := opt.Checkpoint.RestoreTables(restored, p.prog.Tables); err != nil {
			return 0, err
		}
	}
	opt.Log.Info().Int64("step", restored).Str("dir", opt.Checkpoint.Dir).Msg("resumed from checkpoint")
	return restored, nil
}

// runParts runs every part's loop from step first until the trainers are
// done, and returns the last step and how many parts streamed their
// update. The part that failed cancelled the others: its error is
// reported, not their cancellation.
func runParts(ctx context.Context, cancel context.CancelFunc, parts []*part, c Comm, opt ServeOptions, first int64) (int64, int, error) {
	var snap *snapshot
	if ck := opt.Checkpoint; ck != nil && ck.Every > 0 {
		snap = &snapshot{ck: ck, log: opt.Log, parts: len(parts), pending: map[int64]*pendingCk{}}
	}
	for _, p := range parts {
		p.rv = c.Part(p.params, first)
		p.applied.advance(first)
	}

	servers, err := shardServers(parts, c.Async())
	if err != nil {
		return 0, 0, err
	}
	if len(parts) == 0 && len(servers) == 0 {
		opt.Log.Info().Msg("this pserver holds nothing (more pservers than parameter blocks); it waits for the trainers to finish")
		return first, 0, idle(ctx, c)
	}
	errs := make([]error, len(parts)+len(servers))
	var streamed atomic.Int64
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.step, errs[i] = serveLoop(ctx, p, i, c, opt, first, snap, &streamed)
			if errs[i] != nil && !comm.Finished(errs[i]) {
				cancel()
			}
		}()
	}
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.serve(ctx, c)
			if err != nil && !comm.Finished(err) {
				errs[len(parts)+i] = err
				cancel()
			}
		}()
	}
	wg.Wait()
	var last int64
	failed := snap.wait() // the checkpoints written in the background
	for i, err := range errs {
		if err != nil && !comm.Finished(err) && (failed == nil || errors.Is(failed, context.Canceled) && !errors.Is(err, context.Canceled)) {
			failed = err
		}
		if i < len(parts) {
			last = max(last, parts[i].step)
		}
	}
	return last, int(streamed.Load()), failed
}

// idle is the serving of a pserver that holds nothing (split placed no
// block on it: more pservers than blocks): it waits until every trainer
// said Done, as a pserver's loops do, so that the trainers, which connect
// to every pserver, find it there until they finish.
func idle(ctx context.Context, c Comm) error {
	for i := range c.Trainers() {
		for {
			err := c.Endpoint().WaitDone(ctx, transport.Trainer(i))
			if err == nil {
				break
			}
			if err := c.RideOut(ctx, err); err != nil {
				return err
			}
		}
	}
	return nil
}

// finish ends a pserver whose parts all stopped at the trainers' end:
// it checks that every trainer finished at step last, saves a checkpoint
// of the last step (so a finished job can be continued from where it
// ended) and the table shards it holds (--save), and tells the trainers
// it is done.
func finish(ctx context.Context, g *dsl.Graph, parts []*part, c Comm, opt ServeOptions, first, last int64) error {
	if err := awaitTrainers(ctx, opt.Transfers, c, last, greeter{parts, last}); err != nil {
		return c.StopJob(err)
	}
	if ck := opt.Checkpoint; ck != nil && ck.Every > 0 && last > first && last%int64(ck.Every) != 0 {
		vars, all := program.Scope{}, true
		for _, p := range parts {
			maps.Copy(vars, program.PersistentOf(p.prog))
			all = all && p.step == last
		}
		if all {
			for _, p := range parts {
				if err := p.saveTables(ck, last); err != nil {
					return c.StopJob(err)
				}
			}
			if err := ck.Save(last, vars); err != nil {
				return c.StopJob(err)
			}
		}
	}
	if err := c.Finish(ctx); err != nil {
		return err
	}
	if opt.Save != "" {
		if err := saveShards(opt.Save, g, parts, last); err != nil {
			return err
		}
		opt.Log.Info().Str("file", opt.Save).Msg("saved the lookup-table shards")
	}
	return nil
}

// serveLoop runs one part of a pserver's graph step after step until the
// trainers are done (a finished error) or something fails.
// The first part (index 0) also counts the pserver's steps for
// Prometheus; opt.Publisher learns what each step changed.
func serveLoop(ctx context.Context, p *part, index int, c Comm, opt ServeOptions, first int64, snap *snapshot, streamed *atomic.Int64) (int64, error) {
	counts := index == 0
	rv := p.rv
	rt := &program.Runtime{Ctx: ctx, PS: rv}
	logEvery := int64(max(opt.LogEvery, 1))
	vars := program.PersistentOf(p.prog)
	var sp *streamedPart
	if !opt.NoStream {
		sp = newStreamedPart(p.prog, rv, opt.Log)
	}
	if sp != nil {
		streamed.Add(1)
	}
	stepStart := time.Now()
	for k := first; ; k++ {
		// The previous step's sends carry the parameter's own memory,
		// which this step updates in place: they must be written first.
		if err := c.Flush(ctx); err != nil {
			return k, err
		}
		rt.StepNum = k
		var err error
		if sp != nil {
			err = sp.run(rt)
		} else {
			err = p.prog.Run(rt)
		}
		if err != nil {
			return k, err
		}
		p.applied.advance(k + 1)
		opt.Publisher.applied(index, k+1)
		if opt.Prom != nil {
			now := time.Now()
			opt.Prom.Update(now.Sub(stepStart))
			stepStart = now
			if counts {
				opt.Prom.ServedStep()
			}
		}
		if snap != nil && (k+1)%int64(snap.ck.Every) == 0 {
			// The part's dynamic shards are cut between its steps, on its
			// loop, and written beside its next steps; the checkpoint that
			// lists the step is written once they are.
			if err := snap.add(k+1, vars, p.cutTables(snap.ck, k+1)); err != nil {
				return k, err
			}
		}
		if opt.LogEvery > 0 && (k+1)%logEvery == 0 {
			opt.Log.Info().Int64("step", k+1).Msg("serve")
		}
	}
}

// awaitTrainers checks, once one trainer finished at step k, that every
// trainer finished there too: in sync mode they run the same steps. A
// trainer that comes back meanwhile as a new process is welcomed: sent
// the parameters that tell it the job is at its end.
func awaitTrainers(ctx context.Context, ts []dsl.Transfer, c Comm, k int64, g greeter) error {
	for _, t := range ts {
		if !t.Recv || t.Kind != dsl.GradTransfer && t.Kind != dsl.ClipFactorTransfer {
			continue
		}
		buf := make([]byte, t.Bytes)
		ep := c.Endpoint()
		if c.Async() || t.Count != c.Trainers() {
			for {
				key, err := ep.RecvAny(ctx, t.Var, buf)
				if errors.Is(err, transport.ErrAllDone) {
					break
				}
				if err == nil {
					return fmt.Errorf("%s arrived after the trainers finished", key)
				}
				// A connection lost at the end: its Done is written again.
				if err := c.RideOut(ctx, err); err != nil {
					return err
				}
			}
			continue
		}
		for i := range c.Trainers() {
			if err := awaitDone(ctx, c, i, k, t.Var, buf, g); err != nil {
				return err
			}
		}
	}
	return nil
}

// awaitDone waits until trainer i said Done with nothing more of v at
// step k, riding out a connection lost meanwhile (what the loss cut off,
// the Done included, is written again).
func awaitDone(ctx context.Context, c Comm, i int, k int64, v string, buf []byte, g greeter) error {
	for {
		w, restarted := c.Watched(ctx) // before the welcome: a restart after it cancels w
		if err := g.welcome(ctx); err != nil {
			return err
		}
		err := c.Endpoint().Recv(w, transport.Trainer(i), k, v, buf)
		switch {
		case err == nil:
			return fmt.Errorf("trainer-%d sent %s for step %d after another trainer finished at that step; in sync mode every trainer runs the same number of steps", i, v, k)
		case errors.Is(err, transport.ErrPeerDone):
			return nil
		case ctx.Err() == nil && restarted.Err() != nil: // welcome it
			continue
		}
		if err := c.RideOut(ctx, err); err != nil {
			return err
		}
	}
}

// greeter welcomes the trainers that come back as new processes at the
// job's end, step last: each part sends them its current parameters
// (comm.Part.Welcome), so that they learn the job is at its end and say
// Done instead of waiting for the parameters of a step that never comes.
type greeter struct {
	parts []*part
	last  int64
}

func (g greeter) welcome(ctx context.Context) error {
	for _, p := range g.parts {
		if err := p.rv.Welcome(ctx, g.last); err != nil { // runParts gave each part its rv
			return err
		}
	}
	return nil
}

// saveShards writes the lookup-table shards of a pserver's parts to path.
func saveShards(path string, g *dsl.Graph, parts []*part, step int64) error {
	all := program.Scope{}
	for _, p := range parts {
		maps.Copy(all, p.prog.Scope)
	}
	var shards []string
	for _, n := range dsl.TableShards(g) {
		if !g.Vars[n].IsDynamic() { // a dynamic shard's rows: its dyntable.Table
			shards = append(shards, n)
		}
	}
	return modelfile.SaveTensors(path, g.Name, step, shards, all)
}
