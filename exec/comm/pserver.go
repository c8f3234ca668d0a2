package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/rejoin"
	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/transport"
)

// PServer is a pserver's communication: StartServing before the first
// step, then one Part per parameter block loop, each that loop's
// kernels.ServerRendezvous (it serves pserver.Comm). A lost trainer gets the timeout to come back; a
// trainer that came back as a new process gets each part's parameters
// (rejoin.Part decides).
type PServer struct {
	node
	// started is each trainer's incarnation when the pserver started
	// serving (StartServing); read-only after.
	started []int64

	mu     sync.Mutex
	source map[string]transport.Key // per transfer: the last piece RecvAny took (Reply's address)
}

// NewPServer returns the communication of a pserver of a job of
// cfg.Trainers trainers.
func NewPServer(cfg Config) *PServer {
	ids := make([]transport.NodeID, max(cfg.Trainers, 1))
	for i := range ids {
		ids[i] = transport.Trainer(i)
	}
	return &PServer{node: newNode(cfg, ids), source: map[string]transport.Key{}}
}

// Initial is a parameter a pserver serves before its first step: its
// transfer and its persistent tensor.
type Initial struct {
	Var string
	T   *tensor.Tensor
}

// StartServing gathers every trainer's position, decides the first step
// (rejoin.Gather), and sends each trainer its parameters and resume step.
// restored is the step of the checkpoint restored, -1 for none.
func (c *PServer) StartServing(ctx context.Context, params []Initial, restored int64) (int64, error) {
	plan, err := c.gather(ctx, restored)
	if err != nil {
		return 0, err
	}
	if !c.async {
		c.ep.DropBefore(plan.Start) // gradients of steps already applied
	}
	c.started = make([]int64, c.trainers)
	for i := range c.started {
		c.started[i] = c.incarnation(transport.Trainer(i))
	}
	for i := range c.trainers {
		to := transport.Trainer(i)
		if k := plan.Publish[i]; k >= 0 && plan.Err == nil {
			for _, p := range params {
				if err := c.ep.Send(ctx, to, k, p.Var, p.T.DType, p.T.Bytes()); err != nil {
					return 0, err
				}
			}
		}
		if err := c.ep.Send(ctx, to, CtrlStep, ResumeVar, ResumeSpec.DType, rejoin.StepBytes(plan.Resume[i])); err != nil {
			return 0, err
		}
	}
	if plan.Err != nil {
		return 0, plan.Err
	}
	return plan.Start, nil
}

// gather receives every trainer's position and feeds them to a
// rejoin.Gather until it says where to start.
func (c *PServer) gather(ctx context.Context, restored int64) (rejoin.StartPlan, error) {
	type heard struct {
		i   int
		pos rejoin.Position
		err error
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan heard, c.trainers)
	for i := range c.trainers {
		go func() {
			p, err := c.recvPosition(wctx, transport.Trainer(i))
			ch <- heard{i, p, err}
		}()
	}
	g := rejoin.NewGather(c.trainers, restored, c.async, c.timeout > 0)
	var timer <-chan time.Time
	for {
		var act rejoin.GatherAction
		select {
		case r := <-ch:
			if r.err != nil {
				if ctx.Err() != nil {
					return rejoin.StartPlan{}, ctx.Err()
				}
				return rejoin.StartPlan{}, fmt.Errorf("waiting for trainer-%d's position: %w", r.i, r.err)
			}
			act = g.Step(rejoin.Heard{Trainer: r.i, Pos: r.pos})
		case <-timer:
			act = g.Step(rejoin.TimedOut{})
		case <-ctx.Done():
			return rejoin.StartPlan{}, ctx.Err()
		}
		switch a := act.(type) {
		case rejoin.StartTimer:
			timer = time.After(c.timeout)
			c.log.Warn().Dur("timeout", c.timeout).Msg(a.Reason)
		case rejoin.Stop:
			return rejoin.StartPlan{}, a.Err
		case rejoin.Start:
			switch {
			case a.Note == "":
			case a.Warn:
				c.log.Warn().Int64("step", a.Plan.Start).Msg(a.Note)
			default:
				c.log.Info().Int64("step", a.Plan.Start).Msg(a.Note)
			}
			return a.Plan, nil
		}
	}
}

// recvPosition receives trainer who's position, waiting for it when lost.
func (c *PServer) recvPosition(ctx context.Context, who transport.NodeID) (rejoin.Position, error) {
	buf := make([]byte, PositionSpec.Bytes)
	for {
		err := c.ep.Recv(ctx, who, CtrlStep, PositionVar, buf)
		switch {
		case err == nil:
			return rejoin.DecodePosition(buf), nil
		case lostPeer(err) && c.timeout > 0 && ctx.Err() == nil:
			if err := c.awaitTrainer(ctx, who, -1, err); err != nil {
				return rejoin.Position{}, err
			}
		default:
			return rejoin.Position{}, err
		}
	}
}

// awaitTrainer gives a lost trainer the timeout to come back (the same
// process after a network fault, or one restarted with the same index),
// then fails naming it.
func (c *PServer) awaitTrainer(ctx context.Context, who transport.NodeID, step int64, cause error) error {
	ev := c.log.Warn().Str("trainer", who.String()).Dur("timeout", c.timeout)
	if step >= 0 {
		ev = ev.Int64("step", step)
	}
	ev.Msg("lost a trainer; waiting for it to come back")
	wctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.ep.WaitPeer(wctx, who); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The peer stopped the job and said why (its abort frame can
		// arrive just after its data stream closed): that is the reason.
		var ab *transport.Aborted
		if errors.As(err, &ab) {
			return err
		}
		at := ""
		if step >= 0 {
			at = fmt.Sprintf(" at step %d", step)
		}
		return fmt.Errorf("%s was lost%s and did not come back within %v; the job stops: %w", who, at, c.timeout, cause)
	}
	c.log.Info().Str("trainer", who.String()).Msg("trainer is back")
	return nil
}

// Watched is a child of ctx cancelled when a trainer comes back as a new
// process, with the context of that restart (its Err is set then): a
// receive that must notice a restart (the end's, Part.Welcome) runs under
// it.
func (c *PServer) Watched(ctx context.Context) (w, restarted context.Context) {
	return c.watch.watched(ctx)
}

// Flush waits until every tensor handed to Send was written, so its
// memory may be overwritten. A trainer lost with messages queued for it
// gets the timeout to come back; the messages are then written (the same
// process) or dropped (a restarted one).
func (c *PServer) Flush(ctx context.Context) error {
	for {
		err := c.ep.Flush(ctx)
		var pe *transport.PeerError
		if !lostPeer(err) || !errors.As(err, &pe) || c.timeout <= 0 {
			return err
		}
		if err := c.awaitTrainer(ctx, pe.Peer, -1, err); err != nil {
			return err
		}
	}
}

// Finish flushes (riding out a trainer lost at the end too, as Flush
// does) and tells every trainer this pserver is done.
func (c *PServer) Finish(ctx context.Context) error {
	if err := c.Flush(ctx); err != nil {
		return err
	}
	return c.done(ctx)
}

// RideOut is what a receive that failed with err does when it cannot go
// on itself (the end of the job, which waits for every trainer's Done):
// when err is a trainer's lost connection and the pserver waits for lost
// trainers, it waits for the trainer to come back and returns nil (receive
// again: what the loss cut off is written again); otherwise err.
func (c *PServer) RideOut(ctx context.Context, err error) error {
	var pe *transport.PeerError
	if c.timeout <= 0 || !lostPeer(err) || !errors.As(err, &pe) || ctx.Err() != nil {
		return err
	}
	return c.awaitTrainer(ctx, pe.Peer, -1, err)
}

// recvAny receives the next piece of v from any trainer into dst (or
// sink). A trainer lost meanwhile gets the timeout to come back, as in
// sync mode; a piece its connection cut off part-way is then taken up
// where it stopped, from that trainer, so the receiver never mixes two
// pieces. The piece's source is Reply's address for v.
func (c *PServer) recvAny(ctx context.Context, v string, dst []byte, sink transport.Sink) (transport.Key, error) {
	var k transport.Key
	for {
		var err error
		switch {
		case k.Var == "" && sink != nil: // nothing taken yet: any trainer's piece will do
			k, err = c.ep.RecvAnySink(ctx, v, sink)
		case k.Var == "":
			k, err = c.ep.RecvAny(ctx, v, dst)
		case sink != nil: // the rest of the piece k
			err = c.ep.RecvSink(ctx, k.Src, k.Step, v, sink)
		default:
			err = c.ep.Recv(ctx, k.Src, k.Step, v, dst)
		}
		if err == nil {
			c.mu.Lock()
			c.source[v] = k
			c.mu.Unlock()
			return k, nil
		}
		var pe *transport.PeerError
		if c.timeout <= 0 || !lostPeer(err) || !errors.As(err, &pe) || ctx.Err() != nil {
			return k, err
		}
		if werr := c.awaitTrainer(ctx, pe.Peer, -1, err); werr != nil {
			return k, werr
		}
	}
}

// Part is the kernels.ServerRendezvous of one part's loop (a parameter block
// and its optimizer): its receives from the trainers send a trainer that
// came back as a new process this part's current parameters first
// (rejoin.Part), so it can join at this step.
type Part struct {
	c      *PServer
	params []Initial
	m      *rejoin.Part // nil: the part does not wait for lost trainers
	now    []int64      // the trainers' incarnations, read before each receive
	q      *quiet       // nil: not tracked (TrackQuiet)
}

// Part returns the rendezvous of a part that serves params and started
// at step first (StartServing's).
func (c *PServer) Part(params []Initial, first int64) *Part {
	p := &Part{c: c, params: params, now: make([]int64, c.trainers)}
	if c.timeout > 0 && !c.async {
		p.m = rejoin.NewPart(c.started, first)
	}
	return p
}

// Send implements kernels.Rendezvous: to one trainer, or (Index -1)
// every trainer.
func (p *Part) Send(ctx context.Context, step int64, to ir.Node, v string, dt ir.DType, payload []byte) error {
	if to.Index >= 0 {
		return p.c.ep.Send(ctx, to, step, v, dt, payload)
	}
	for i := range p.c.trainers {
		if err := p.c.ep.Send(ctx, transport.Trainer(i), step, v, dt, payload); err != nil {
			return err
		}
	}
	return nil
}

// Reply implements kernels.ServerRendezvous.
func (p *Part) Reply(ctx context.Context, offset int64, replyTo, v string, dt ir.DType, payload []byte) error {
	p.c.mu.Lock()
	k, ok := p.c.source[replyTo]
	p.c.mu.Unlock()
	if !ok {
		return fmt.Errorf("send %s: reply_to %q names no transfer received yet", v, replyTo)
	}
	return p.c.ep.Send(ctx, k.Src, k.Step+offset, v, dt, payload)
}

// Recv implements kernels.Rendezvous: trainer from's piece of v@step. A
// sharded table's messages (of varying length) end at a restart of their
// trainer in a sync job (rejoin.TableRestart); a block's gradient
// rides out a lost or restarted trainer (recvRejoin).
func (p *Part) Recv(ctx context.Context, step int64, from ir.Node, v string, dst []byte) (int, error) {
	c := p.c
	if sink := c.prefix(v, dst); sink != nil {
		defer release(sink)
		return c.recvTable(ctx, step, from, v, sink)
	}
	if p.m == nil {
		return len(dst), c.ep.Recv(ctx, from, step, v, dst)
	}
	return len(dst), p.recvRejoin(ctx, from, step, v, dst, nil)
}

// RecvAny implements kernels.ServerRendezvous.
func (p *Part) RecvAny(ctx context.Context, v string, dst []byte) (int, ir.Node, int64, error) {
	sink := p.c.prefix(v, dst)
	defer release(sink)
	var s transport.Sink
	if sink != nil {
		s = sink
	}
	k, err := p.c.recvAny(ctx, v, dst, s)
	if err != nil {
		return 0, ir.Node{}, 0, err
	}
	if p.q != nil {
		p.q.received(v, k.Src.Index, k.Step)
	}
	if sink != nil {
		return sink.N, k.Src, k.Step, nil
	}
	return len(dst), k.Src, k.Step, nil
}

// Pending implements kernels.ServerRendezvous. A trainer lost meanwhile gets the
// timeout to come back, as for a gradient.
func (p *Part) Pending(ctx context.Context, vs []string) (string, error) {
	if p.q != nil {
		return p.pendingQuiet(ctx, vs)
	}
	return p.pendingWait(ctx, vs)
}

func (p *Part) pendingWait(ctx context.Context, vs []string) (string, error) {
	c := p.c
	for {
		v, err := c.ep.Pending(ctx, vs)
		var pe *transport.PeerError
		if err == nil || c.timeout <= 0 || !lostPeer(err) || !errors.As(err, &pe) || ctx.Err() != nil {
			return v, err
		}
		if werr := c.awaitTrainer(ctx, pe.Peer, -1, err); werr != nil {
			return "", werr
		}
	}
}

// AccumulateSink receives one trainer's piece of v@step (sync with one
// trainer: from trainer-0; else from any) into sink as it arrives: a
// pserver applies a large gradient chunk by chunk (Streamer). A
// connection lost in the middle is resumed into the same sink from the
// byte it stopped at.
func (p *Part) AccumulateSink(ctx context.Context, step int64, v string, sink transport.Sink) error {
	c := p.c
	if c.trainers == 1 && !c.async {
		if p.m != nil {
			return p.recvRejoin(ctx, transport.Trainer(0), step, v, nil, sink)
		}
		return c.ep.RecvSink(ctx, transport.Trainer(0), step, v, sink)
	}
	_, err := c.recvAny(ctx, v, nil, sink)
	return err
}

// recvRejoin receives who's piece of v@step. When who was lost it waits
// for it. Before each receive, the part sends its current parameters to
// every trainer that came back as a new process (rejoin.Part.Check).
func (p *Part) recvRejoin(ctx context.Context, who transport.NodeID, step int64, v string, into []byte, sink transport.Sink) error {
	c := p.c
	for {
		w, rc := c.watch.watched(ctx) // before the checks: a restart after them cancels w
		for i := range p.now {
			p.now[i] = c.incarnation(transport.Trainer(i))
		}
		for _, s := range p.m.Check(p.now, step) {
			to := transport.Trainer(s.To)
			c.log.Warn().Str("trainer", to.String()).Int64("step", step).Msg("trainer restarted; sending it the current parameters")
			if err := p.sendParams(ctx, to, s.From, s.Through); err != nil {
				return err
			}
		}
		var err error
		if sink != nil {
			err = c.ep.RecvSink(w, who, step, v, sink)
		} else {
			err = c.ep.Recv(w, who, step, v, into)
		}
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case rc.Err() != nil: // a trainer restarted while we waited
			continue
		case lostPeer(err):
			if err := c.awaitTrainer(ctx, who, step, err); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// Welcome sends the part's current parameters to every trainer that came
// back as a new process since the part last looked (rejoin.Part.Check), as
// if the part were to receive a piece of step. The pservers call it at the
// job's end, where no gradient is received any more: a trainer killed after
// its last step and restarted learns from them that the job is at step
// (comm.Trainer.LearnStep), has no step left to run and says Done, where
// it would otherwise wait for parameters for ever, and the job with it
// (TestStreamRestartedTrainerTrainsOnce hung so about once in 250 runs).
func (p *Part) Welcome(ctx context.Context, step int64) error {
	if p.m == nil {
		return nil
	}
	for i := range p.now {
		p.now[i] = p.c.incarnation(transport.Trainer(i))
	}
	for _, s := range p.m.Check(p.now, step) {
		to := transport.Trainer(s.To)
		p.c.log.Warn().Str("trainer", to.String()).Int64("step", step).Msg("trainer restarted at the job's end; sending it the last parameters")
		if err := p.sendParams(ctx, to, s.From, s.Through); err != nil {
			return err
		}
	}
	return nil
}

// sendParams sends the part's parameters to trainer to for steps from..through.
func (p *Part) sendParams(ctx context.Context, to transport.NodeID, from, through int64) error {
	for _, x := range p.params {
		for k := from; k <= through; k++ {
			if err := p.c.ep.Send(ctx, to, k, x.Var, x.T.DType, x.T.Bytes()); err != nil {
				return err
			}
		}
	}
	return nil
}

// recvTable receives a sharded table's message of varying length (a
// trainer's ids or row gradient) from trainer from into sink. In a sync
// job the receive ends when from comes back as a new process, which a
// sync shard cannot take (rejoin.TableRestart); a trainer lost meanwhile
// gets the timeout to come back, as for a gradient.
func (c *PServer) recvTable(ctx context.Context, step int64, from ir.Node, v string, sink *transport.Prefix) (int, error) {
	sync := from.Role == ir.TrainerRole && !c.async && c.started != nil && from.Index < len(c.started)
	for {
		if sync {
			if err := rejoin.TableRestart(from.Index, v, step, c.started[from.Index], c.incarnation(from)); err != nil {
				return 0, err
			}
		}
		var err error
		restarted := false
		if sync {
			w, rc := c.watch.watched(ctx)
			err = c.ep.RecvSink(w, from, step, v, sink)
			restarted = err != nil && rc.Err() != nil && ctx.Err() == nil
		} else {
			err = c.ep.RecvSink(ctx, from, step, v, sink)
		}
		if err == nil {
			return sink.N, nil
		}
		if restarted { // check again whether it was from
			sink.N = 0
			continue
		}
		var pe *transport.PeerError
		if from.Role != ir.TrainerRole || c.timeout <= 0 || !lostPeer(err) || !errors.As(err, &pe) || ctx.Err() != nil {
			return 0, err
		}
		if werr := c.awaitTrainer(ctx, pe.Peer, step, err); werr != nil {
			return 0, werr
		}
	}
}

var _ kernels.ServerRendezvous = (*Part)(nil)
