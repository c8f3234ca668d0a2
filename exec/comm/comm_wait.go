package comm

// How NetComm waits for peers that were lost or restarted: a trainer for a
// pserver (recvFromPServer, in restart_trainer.go, and peek), a pserver
// part for a trainer (awaitPeer, recvRejoin), and a restarted trainer for
// the step it joins at (LearnStep).

import (
	"context"
	"errors"
	"fmt"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/transport"
)

// lostPeer reports whether err is a peer's connection failing (not its
// normal end).
func lostPeer(err error) bool {
	var pe *transport.PeerError
	var ab *transport.Aborted
	return errors.As(err, &pe) && !errors.Is(err, transport.ErrPeerDone) && !errors.Is(err, transport.ErrUnknownPeer) && !errors.As(err, &ab)
}

// awaitPeer gives a lost trainer TrainerTimeout to come back (the same
// process after a network fault, or one restarted with the same index),
// then fails naming it.
func (c *NetComm) awaitPeer(ctx context.Context, who transport.NodeID, step int64, cause error) error {
	ev := c.Log.Warn().Str("trainer", who.String()).Dur("timeout", c.TrainerTimeout)
	if step >= 0 {
		ev = ev.Int64("step", step)
	}
	ev.Msg("lost a trainer; waiting for it to come back")
	wctx, cancel := context.WithTimeout(ctx, c.TrainerTimeout)
	defer cancel()
	if err := c.EP.WaitPeer(wctx, who); err != nil {
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
		return fmt.Errorf("%s was lost%s and did not come back within %v; the job stops: %w", who, at, c.TrainerTimeout, cause)
	}
	c.Log.Info().Str("trainer", who.String()).Msg("trainer is back")
	return nil
}

// part is one pserver loop's view of rejoining trainers: the restarts it
// has handled, and how to send its current parameters to a newcomer.
type Part struct {
	Known  map[transport.NodeID]int64
	Resend func(ctx context.Context, to transport.NodeID, step int64) error
}

type partKey struct{}

func WithPart(ctx context.Context, p *Part) context.Context {
	return context.WithValue(ctx, partKey{}, p)
}

func partOf(ctx context.Context) *Part {
	p, _ := ctx.Value(partKey{}).(*Part)
	return p
}

// restartCtx returns a context cancelled at the next restart of any peer
// (a watcher per peer, started once, bumps it).
func (c *NetComm) restartCtx(ctx context.Context) context.Context {
	c.watchOnce.Do(func() {
		c.rctx, c.rcancel = context.WithCancel(context.Background())
		for _, who := range c.Peers {
			go func() {
				var seen int64
				for {
					n, next := c.EP.Restarts(who)
					if n != seen {
						seen = n
						c.restarted.Add(1)
						c.rmu.Lock()
						c.rcancel()
						c.rctx, c.rcancel = context.WithCancel(context.Background())
						c.rmu.Unlock()
						continue
					}
					select {
					case <-next:
					case <-ctx.Done():
						return
					}
				}
			}()
		}
	})
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return c.rctx
}

// recvRejoin receives who's piece for step. When who was lost it waits for
// it (awaitPeer). When any trainer came back as a new process, this part
// first sends it its current parameters, so it can join at this step —
// whichever trainer the part is waiting for: a part one step ahead waits
// for a surviving trainer, which waits for the parts behind.
func (c *NetComm) recvRejoin(ctx context.Context, pt *Part, trainers []transport.NodeID, who transport.NodeID, step int64, v string, into []byte, sink transport.Sink) error {
	for {
		w, rc := c.watched(ctx) // before the checks: a restart after them cancels w
		for _, tr := range trainers {
			if n, _ := c.EP.Restarts(tr); n != pt.Known[tr] {
				pt.Known[tr] = n
				c.Log.Warn().Str("trainer", tr.String()).Int64("step", step).Msg("trainer restarted; sending it the current parameters")
				if err := pt.Resend(ctx, tr, step); err != nil {
					return err
				}
			}
		}
		var err error
		if sink != nil {
			err = c.EP.RecvSink(w, who, step, v, sink)
		} else {
			err = c.EP.Recv(w, who, step, v, into)
		}
		restarted := err != nil && rc.Err() != nil
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case restarted: // a trainer restarted while we waited
			continue
		case lostPeer(err):
			if err := c.awaitPeer(ctx, who, step, err); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// waitBack waits for a lost peer to be connected again, as long as this
// node waits for its kind: TrainerTimeout for a trainer, PServerTimeout
// for a pserver. It fails at once when that is 0 or ctx ended.
func (c *NetComm) waitBack(ctx context.Context, p transport.NodeID) error {
	timeout := c.TrainerTimeout
	if p.Role == ir.PServerRole {
		timeout = c.PServerTimeout
	}
	if timeout <= 0 || ctx.Err() != nil {
		return fmt.Errorf("not waiting for %s", p)
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c.EP.WaitPeer(wctx, p)
}

// peek is Endpoint.Peek riding out a lost connection to the pserver (the
// same wait as a recv: up to PServerTimeout for it to come back).
func (c *NetComm) peek(ctx context.Context, p transport.NodeID, v string) (int64, error) {
	for {
		k, err := c.EP.Peek(ctx, p, v)
		if err == nil || !lostPeer(err) {
			return k, err
		}
		if werr := c.waitBack(ctx, p); werr != nil {
			if c.PServerTimeout <= 0 || ctx.Err() != nil {
				return 0, err
			}
			return 0, c.pserverGone(ctx, p, err, werr)
		}
	}
}

// LearnStep is the step a (re)started trainer joins at: it waits until a
// parameter message is pending for every recv op of its graph and returns
// the newest of their oldest steps. The pservers send their parameters for
// the step they are at (and the one before, when their parts may differ by
// one), so at that step every recv finds its message.
func (c *NetComm) LearnStep(ctx context.Context, g *dsl.Graph) (int64, error) {
	ts, err := g.Transfers(g.Batch(), nil)
	if err != nil {
		return 0, err
	}
	step, any := int64(0), false
	for _, t := range ts {
		// Parameters only: a pserver's partial norm (clip) is sent after
		// the gradients arrive, not with the parameters.
		if !t.Recv || t.Kind != dsl.ParamTransfer || t.Peer.Index < 0 {
			continue
		}
		k, err := c.peek(ctx, t.Peer, t.Var)
		if err != nil {
			return 0, fmt.Errorf("learning the start step from %s: %w", t.Peer, err)
		}
		if !any || k > step {
			step, any = k, true
		}
	}
	if c.links != nil {
		c.links.learned(step)
	}
	return step, nil
}

// untilRestart runs recv with a context that also ends when rc does (the
// next restart of any peer, restartCtx). restarted reports that recv
// failed because of that restart, not because ctx ended.
func untilRestart(ctx, rc context.Context, recv func(context.Context) error) (restarted bool, err error) {
	rctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(rc, cancel)
	err = recv(rctx)
	restarted = err != nil && rc.Err() != nil && ctx.Err() == nil
	stop()
	cancel()
	return restarted, err
}
