package comm

// The trainer's side of the restart protocol: the I/O around rejoin.Link.
// A receive from a pserver checks the pserver's incarnation first; a
// failure or a new incarnation hands the link to drive, which does what
// the link's state machine says (wait for the pserver, tell a new
// incarnation this trainer's position, re-send what it lacks) until the
// link is up again.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/psgraph/psgraph/exec/rejoin"
	"github.com/psgraph/psgraph/transport"
)

// recvFromPServer receives v@step from pserver p into dst (or, for a
// payload of varying length, into sink) so that it rides out a lost
// pserver: it waits for p to come back, and when p came back as a new
// process brings it up to date before receiving again. A restart is
// noticed even without an error: the receive is woken by it.
func (c *Trainer) recvFromPServer(ctx context.Context, p transport.NodeID, step int64, v string, dst []byte, sink *transport.Prefix) (int, error) {
	l := c.links[p]
	if l == nil {
		return c.recvInto(ctx, p, step, v, dst, sink)
	}
	for {
		w, rc := c.watch.watched(ctx) // before the checks: a restart after them cancels w
		if err := c.rejoinRestarted(ctx); err != nil {
			return 0, err
		}
		if now := c.incarnation(p); now != l.told.Load() {
			if err := c.drive(ctx, l); err != nil {
				return 0, err
			}
			if sink != nil { // what arrived from the old process was dropped
				sink.N = 0
			}
			continue
		}
		n, err := c.recvInto(w, p, step, v, dst, sink)
		switch {
		case err == nil:
			if got := l.got[v]; got != nil {
				got.Store(step)
			}
			return n, nil
		case ctx.Err() != nil:
			return 0, ctx.Err()
		case rc.Err() != nil: // some peer restarted while we waited: check again
			continue
		case lostPeer(err):
			// The same process back after a blip: what it sent and this
			// trainer lacks is written again (transport resumption), so
			// the receive goes on; a new one is brought up to date first,
			// and what arrived from the old one is gone.
			before := l.told.Load()
			if err := c.recover(ctx, l, err); err != nil {
				return 0, err
			}
			if sink != nil && l.told.Load() != before {
				sink.N = 0
			}
		default:
			return 0, err
		}
	}
}

// rejoinRestarted brings every pserver that restarted since the last
// check up to date, whichever pserver this trainer waits for: a restarted
// pserver waits for every trainer's position before it serves anyone, and
// the pserver this trainer waits for may itself wait for the restarted
// one's progress (through the other trainers), so the trainer tells it as
// soon as a restart wakes it. Costs two atomic loads when nothing
// restarted: the watch's epoch (the sum of the pservers' incarnations)
// equals the sum of those the links hold the trainer's position.
func (c *Trainer) rejoinRestarted(ctx context.Context) error {
	if c.watch.Epoch() == c.told.Load() {
		return nil
	}
	for _, p := range c.peers {
		l := c.links[p]
		if c.incarnation(p) != l.told.Load() {
			if err := c.drive(ctx, l); err != nil {
				return err
			}
		}
	}
	return nil
}

// recover handles an operation on l's pserver that failed because its
// connection was lost. Another operation may have recovered it already
// (the connection is back): the link is then only checked.
func (c *Trainer) recover(ctx context.Context, l *link, cause error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.connected(l.id) {
		return c.check(ctx, l)
	}
	return c.run(ctx, l, rejoin.Lost{}, cause)
}

// drive brings l's pserver up to date after a restart: it feeds the link's
// state machine the pserver's incarnation and does what it says until the
// link is up (nil) or the trainer cannot go on.
func (c *Trainer) drive(ctx context.Context, l *link) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return c.check(ctx, l)
}

// check is drive with l.mu held.
func (c *Trainer) check(ctx context.Context, l *link) error {
	now := c.incarnation(l.id)
	if l.m.Phase == rejoin.Up && now == l.m.Told {
		return nil // another operation brought it up to date meanwhile
	}
	return c.run(ctx, l, rejoin.Checked{Now: now}, nil)
}

// run is drive's loop; the caller holds l.mu.
func (c *Trainer) run(ctx context.Context, l *link, ev rejoin.LinkEvent, cause error) error {
	for {
		if e, ok := ev.(rejoin.Checked); ok {
			e.Pos = c.position(l)
			ev = e
		}
		switch a := l.m.Step(ev).(type) {
		case rejoin.Proceed:
			if a.Blip {
				c.log.Info().Str("pserver", l.id.String()).Dur("after", time.Since(l.since).Round(time.Millisecond)).Msg("pserver is back (the same process)")
			}
			return nil
		case rejoin.WaitBack:
			if a.First {
				l.since = time.Now()
				c.log.Warn().Str("pserver", l.id.String()).Dur("timeout", c.timeout).Err(cause).Msg("lost a pserver; waiting for it to come back")
			}
			ev = c.waitPServer(ctx, l, cause)
		case rejoin.Tell:
			ev = c.tell(ctx, l, a)
		case rejoin.Resend:
			if err := c.resendAll(ctx, l, a.Step); err != nil {
				return err
			}
			old := l.told.Swap(a.Inc)
			c.told.Add(a.Inc - old)
			return nil
		case rejoin.Fail:
			return a.Err
		}
	}
}

// waitPServer waits (up to the timeout) for l's pserver to be connected.
// A second beyond the timeout: by then the TCP transport, which started
// counting at the loss, gave the pserver up, and its error names the
// address (pserverGone asks for it).
func (c *Trainer) waitPServer(ctx context.Context, l *link, cause error) rejoin.LinkEvent {
	wctx, cancel := context.WithTimeout(ctx, c.timeout+time.Second)
	err := c.ep.WaitPeer(wctx, l.id)
	cancel()
	switch {
	case err == nil:
		return rejoin.Back{Now: c.incarnation(l.id), Pos: c.position(l)}
	case ctx.Err() != nil:
		return asEvent(ctx.Err())
	}
	return rejoin.GaveUp{Err: c.pserverGone(l.id, cause, err)}
}

// tell sends incarnation a.Inc of l's pserver this trainer's position and
// waits for its resume step.
func (c *Trainer) tell(ctx context.Context, l *link, a rejoin.Tell) rejoin.LinkEvent {
	rc := c.watch.restart()
	if c.incarnation(l.id) != a.Inc {
		return rejoin.Interrupted{}
	}
	ev := c.log.Warn().Str("pserver", l.id.String())
	if a.Pos.Known() {
		ev = ev.Int64("sent", a.Pos.Sent).Int64("need", a.Pos.Need)
	}
	ev.Msg("pserver restarted (a new process); telling it this trainer's position")
	if err := c.ep.Send(ctx, l.id, CtrlStep, PositionVar, PositionSpec.DType, a.Pos.Bytes()); err != nil {
		return asEvent(fmt.Errorf("telling the restarted %s this trainer's position: %w", l.id, err))
	}
	wctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	buf := make([]byte, ResumeSpec.Bytes)
	var err error
	for {
		var woken bool
		woken, err = untilRestart(wctx, rc, func(rctx context.Context) error {
			return c.ep.Recv(rctx, l.id, CtrlStep, ResumeVar, buf)
		})
		if !woken {
			break
		}
		// Woken by a restart: of this pserver again (tell the new one), or
		// of another peer, or the watch catching up with this one.
		rc = c.watch.restart()
		if c.incarnation(l.id) != a.Inc {
			return rejoin.Interrupted{}
		}
	}
	switch {
	case err == nil:
		return rejoin.Resumed{Inc: a.Inc, Step: int64(binary.LittleEndian.Uint64(buf))}
	case ctx.Err() != nil:
		return asEvent(ctx.Err())
	case lostPeer(err):
		return rejoin.Interrupted{}
	case errors.Is(err, context.DeadlineExceeded):
		return asEvent(fmt.Errorf("%s restarted but did not say where it resumes within %v (it waits for every trainer's position; see its log)", l.id, c.timeout))
	}
	return asEvent(fmt.Errorf("waiting for the restarted %s: %w", l.id, err))
}

// asEvent is the event of an error that ends a recovery, not the
// protocol's (ctx ended, a send failed): the link fails with it.
func asEvent(err error) rejoin.LinkEvent { return rejoin.GaveUp{Err: err} }

// resendAll re-sends to l's pserver, which resumes at step s, what it
// lacks of every transfer (rejoin.PlanResend decides which steps).
func (c *Trainer) resendAll(ctx context.Context, l *link, s int64) error {
	resent := 0
	for v, m := range l.sent {
		n, err := c.resend(ctx, l.id, v, m, s)
		if err != nil {
			return fmt.Errorf("re-sending %s to the restarted %s: %w", v, l.id, err)
		}
		resent += n
	}
	c.log.Warn().Str("pserver", l.id.String()).Int64("step", s).Int("resent", resent).Msg("the restarted pserver resumes; carrying on")
	return nil
}

// resend re-sends to the restarted pserver p, which starts at step s,
// what it lacks of transfer v.
func (c *Trainer) resend(ctx context.Context, p transport.NodeID, v string, m *sentMsg, s int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := rejoin.SentState{Has: m.has, Request: m.request, Step: m.step, Answer: rejoin.Learning,
		Counted: m.counted, Prev: m.hasPrev && m.prevStep == m.step-1}
	if m.answer != nil {
		st.Answer = m.answer.Load()
	}
	steps := rejoin.PlanResend(st, s, c.async)
	for i, r := range steps {
		var payload []byte
		switch {
		case r.Last:
			payload = m.payload
			m.lent = true
		case r.Prev:
			payload = m.prev
			m.lent = true
		}
		if err := c.ep.Send(ctx, p, r.Step, v, m.dt, payload); err != nil {
			return i, err
		}
	}
	return len(steps), nil
}

// pserverGone is the error of a pserver that did not come back.
func (c *Trainer) pserverGone(p transport.NodeID, cause, waitErr error) error {
	why := waitErr
	var pe *transport.PeerError
	if !errors.As(waitErr, &pe) {
		// Our own deadline. A transport that gave the peer up (TCP, after
		// its connect timeout) names its address: ask without waiting.
		done, cancel := context.WithCancel(context.Background())
		cancel()
		if err := c.ep.WaitPeer(done, p); errors.As(err, &pe) {
			why = err
		} else if cause != nil {
			why = cause
		}
	}
	for errors.As(why, &pe) { // the transport nests its peer errors
		why = pe.Err
	}
	return fmt.Errorf("lost %s and it did not come back within %v (restart it with the same command line, or raise --connect-timeout): %v", p, c.timeout, why)
}
