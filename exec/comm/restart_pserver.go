package comm

// The pserver side of the restart protocol (restart.go): hearing every
// trainer's position and starting where they can all go on.

import (
	"context"
	"fmt"
	"time"

	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/rejoin"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/transport"
)

// initial is a parameter a pserver serves before its first step: its
// transfer and its persistent tensor.
type initial struct {
	v string
	t *tensor.Tensor
}

// initials lists the `initial` parameters of a pserver's parts.
func initials(progs []*program.Program) ([]initial, error) {
	var out []initial
	for _, prog := range progs {
		for _, op := range prog.Graph.Ops {
			name := op.Attrs.String("initial")
			if op.Type != "send" || name == "" {
				continue
			}
			t, ok := prog.Scope[name]
			if !ok {
				return nil, dsl.Errorf(op.Pos, "send: initial %q is not a variable of this node", name)
			}
			out = append(out, initial{v: op.Attrs.String("var"), t: t})
		}
	}
	return out, nil
}

// startServing gathers every trainer's position, decides the first step
// (planStart), and sends each trainer its parameters and resume step.
// restored is the step of the checkpoint restored, -1 for none.
func (c *NetComm) StartServing(ctx context.Context, progs []*program.Program, restored int64) (int64, error) {
	params, err := initials(progs)
	if err != nil {
		return 0, err
	}
	first := max(restored, 0)
	pos, err := c.awaitPositions(ctx, first)
	if err != nil {
		return 0, err
	}
	plan := rejoin.PlanStart(pos, first, c.Async)
	if !c.Async {
		c.EP.DropBefore(plan.Start) // gradients of steps already applied
	}
	c.started = make([]int64, c.Trainers)
	for i := range c.started {
		c.started[i], _ = c.EP.Restarts(transport.Trainer(i))
	}
	running := plan.Behind
	for _, p := range pos {
		running = running || p.Rejoin
	}
	switch {
	case plan.Err != nil:
	case running && restored < 0:
		c.Log.Warn().Int64("step", plan.Start).Msg("RESTARTED INTO A RUNNING JOB WITHOUT A CHECKPOINT: this pserver's blocks start again from their initializers; the job carries on, but everything they had learned is lost (give pservers --checkpoint-dir and --checkpoint-every)")
	case running && c.Async:
		c.Log.Warn().Int64("checkpoint", restored).
			Msgf("restarted into a running job from checkpoint %d (the updates to this pserver's blocks since it are lost; async: each trainer carries on at its own step)", restored)
	case plan.Behind:
		c.Log.Warn().Int64("step", plan.Start).Int64("checkpoint", restored).
			Msgf("restarted into a running job at step %d from checkpoint %d (updates of steps %d..%d to this pserver's blocks are lost)", plan.Start, restored, restored, plan.Start-1)
	case running:
		c.Log.Warn().Int64("step", plan.Start).Msg("restarted into a running job at the step of its checkpoint: no update lost")
	case restored >= 0:
		c.Log.Info().Int64("step", plan.Start).Msg("the trainers join at the restored step")
	}
	for i := 0; i < c.Trainers; i++ {
		to := transport.Trainer(i)
		if k := plan.Publish[i]; k >= 0 && plan.Err == nil {
			for _, p := range params {
				if err := c.EP.Send(ctx, to, k, p.v, DTypeOf(p.t), p.t.Bytes()); err != nil {
					return 0, err
				}
			}
		}
		if err := c.EP.Send(ctx, to, CtrlStep, ResumeVar, ResumeSpec.DType, rejoin.StepBytes(plan.Resume[i])); err != nil {
			return 0, err
		}
	}
	if plan.Err != nil {
		return 0, plan.Err
	}
	return plan.Start, nil
}

// awaitPositions receives every trainer's position (start is the step the
// pserver restored, 0 for none), refusing at once a trainer whose run
// differs from the first one's (checkRun). A fresh job waits for
// its trainers as long as they take to start; once a trainer shows that
// this pserver restarted into a running job (it rejoins, or it is past the
// restored step), the others get TrainerTimeout to report. A trainer lost
// meanwhile gets TrainerTimeout to come back.
func (c *NetComm) awaitPositions(ctx context.Context, start int64) ([]rejoin.Position, error) {
	type result struct {
		i   int
		pos rejoin.Position
		err error
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan result, c.Trainers)
	for i := 0; i < c.Trainers; i++ {
		go func() {
			p, err := c.recvPosition(wctx, transport.Trainer(i))
			ch <- result{i, p, err}
		}()
	}
	pos := make([]rejoin.Position, c.Trainers)
	heard := make([]bool, c.Trainers)
	var timeout <-chan time.Time
	var ahead string
	first := -1 // the trainer heard first: the others' runs must equal its run
	for left := c.Trainers; left > 0; left-- {
		select {
		case r := <-ch:
			if r.err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("waiting for trainer-%d's position: %w", r.i, r.err)
			}
			pos[r.i], heard[r.i] = r.pos, true
			if first < 0 {
				first = r.i
			} else if err := rejoin.CheckRun(r.i, r.pos, first, pos[first], c.Async); err != nil {
				return nil, err
			}
			if (r.pos.Rejoin || r.pos.Known() && r.pos.Sent >= start) && timeout == nil && c.TrainerTimeout > 0 {
				ahead = fmt.Sprintf("trainer-%d rejoins, having sent gradients of step %d", r.i, r.pos.Sent)
				timeout = time.After(c.TrainerTimeout)
				c.Log.Warn().Int("trainer", r.i).Int64("sent", r.pos.Sent).Int64("restored", start).Dur("timeout", c.TrainerTimeout).
					Msg("a restart into a running job; waiting for every trainer's position")
			}
		case <-timeout:
			var missing []string
			for i, h := range heard {
				if !h {
					missing = append(missing, transport.Trainer(i).String())
				}
			}
			return nil, fmt.Errorf("restarted into a running job (%s) but %v sent no position within %v; the job stops", ahead, missing, c.TrainerTimeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return pos, nil
}

// recvPosition receives trainer who's position, waiting for it when lost.
func (c *NetComm) recvPosition(ctx context.Context, who transport.NodeID) (rejoin.Position, error) {
	buf := make([]byte, PositionSpec.Bytes)
	for {
		err := c.EP.Recv(ctx, who, CtrlStep, PositionVar, buf)
		switch {
		case err == nil:
			return rejoin.PositionOf(buf), nil
		case lostPeer(err) && c.TrainerTimeout > 0 && ctx.Err() == nil:
			if err := c.awaitPeer(ctx, who, -1, err); err != nil {
				return rejoin.Position{}, err
			}
		default:
			return rejoin.Position{}, err
		}
	}
}
