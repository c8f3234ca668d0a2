package comm

// The trainer side of the restart protocol (restart.go): what a trainer
// remembers of each pserver, and how it rejoins one that restarted.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/rejoin"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/transport"
)

// links is a trainer's memory of its pservers: what it last sent on each
// transfer and the last step it received of each, to tell a restarted
// pserver where the trainer is and re-send what the restart lost. Built
// once (join); the maps are read-only after.
type links struct {
	start atomic.Int64 // the trainer's first step (learning until known)
	// steps and batch of the trainer's run, in every position it sends
	steps, batch int64
	by           map[transport.NodeID]*link
	// checked is NetComm.restarted as of the last rejoinRestarted
	checked atomic.Int64
}

type link struct {
	id    transport.NodeID
	sent  map[string]*sentMsg
	got   map[string]*atomic.Int64 // last step received, learning before any
	mu    sync.Mutex               // one recovery at a time
	inc   int64                    // restarts of the pserver answered with a position
	gen   atomic.Int64             // recoveries of a restart completed
	down  bool                     // logged as lost, not yet back
	since time.Time
}

// sentMsg is the last message sent on one transfer. Its payload is the
// tensor's memory, which stays intact until the trainer received this
// pserver's next parameters (the gradient is computed from them, and they
// come only once the pserver has the re-sent gradient); a transfer
// computed without them keeps a copy (own), in a new buffer once the old
// one was re-sent (lent: the transport may still be writing it).
//
// A request (a table's ids, fetch_rows) is not a gradient: it does not
// count toward the trainer's position, and answer is the last step of the
// reply it asks for (the table's rows), so a restarted pserver gets
// requests for the steps it will serve that the trainer still waits for
// (rejoinPServer).
type sentMsg struct {
	mu      sync.Mutex
	has     bool
	step    int64
	dt      transport.DType
	payload []byte
	own     bool
	lent    bool
	request bool
	answer  *atomic.Int64
}

// join sets up a trainer's links from its graph and sends every pserver
// its position: start-1, or learning when start < 0.
func (c *NetComm) Join(ctx context.Context, g *dsl.Graph, start int64, steps, batch int) error {
	ls := &links{by: map[transport.NodeID]*link{}, steps: int64(steps), batch: int64(batch)}
	if start < 0 {
		start = rejoin.Learning
	}
	ls.start.Store(start)
	for _, p := range c.Peers {
		ls.by[p] = &link{id: p, sent: map[string]*sentMsg{}, got: map[string]*atomic.Int64{}}
	}
	ts, err := g.Transfers(batch, nil)
	if err != nil {
		return err
	}
	// What the trainer receives from each pserver first: a request's
	// record points at the step of its reply.
	for _, t := range ts {
		if !t.Recv || t.Peer.Role != ir.PServerRole {
			continue
		}
		l, err := ls.link(t, len(c.Peers))
		if err != nil {
			return err
		}
		got := &atomic.Int64{}
		got.Store(rejoin.Learning)
		l.got[t.Var] = got
	}
	prod := g.Producers()
	for _, t := range ts {
		if t.Recv || t.Peer.Role != ir.PServerRole {
			continue
		}
		l, err := ls.link(t, len(c.Peers))
		if err != nil {
			return err
		}
		if t.Kind.Request() { // a table's ids: answered by its rows
			l.sent[t.Var] = &sentMsg{request: true, answer: l.got[ops.TableRows(t.Table)]}
			continue
		}
		l.sent[t.Var] = &sentMsg{own: !fedBy(g, prod, t.Op.Inputs[0], t.Peer.Attr())}
	}
	c.links = ls
	for _, p := range c.Peers {
		l := ls.by[p]
		n, _ := c.EP.Restarts(p)
		if err := c.EP.Send(ctx, p, CtrlStep, PositionVar, PositionSpec.DType, ls.position(l).Bytes()); err != nil {
			return fmt.Errorf("telling %s this trainer's position: %w", p, err)
		}
		l.inc = n
	}
	return nil
}

// link is the link to the pserver of transfer t.
func (ls *links) link(t dsl.Transfer, pservers int) (*link, error) {
	if t.Kind.Table() && t.Op.Attrs.Int("shards") != pservers {
		return nil, dsl.Errorf(t.Op.Pos, "%s: table %s is sharded over %d pservers, but this job has %d", t.Op.Type, t.Table, t.Op.Attrs.Int("shards"), pservers)
	}
	l := ls.by[t.Peer]
	if l == nil {
		return nil, dsl.Errorf(t.Op.Pos, "%s: %s is not a pserver of this job", t.Op.Type, t.Peer.Attr())
	}
	return l, nil
}

// fedBy reports whether variable v is computed from a parameter received
// from peer (a recv op with from: peer), so its memory cannot be
// overwritten before that peer's next parameters arrived.
func fedBy(g *dsl.Graph, prod map[string]int, v, peer string) bool {
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(v string) bool {
		if seen[v] {
			return false
		}
		seen[v] = true
		i, ok := prod[v]
		if !ok {
			return false
		}
		op := g.Ops[i]
		if op.Type == "recv" && op.Attrs.String("from") == peer || op.Type == "fetch_rows" { // rows of every pserver
			return true
		}
		for _, in := range op.Inputs {
			if walk(in) {
				return true
			}
		}
		return false
	}
	return walk(v)
}

// learned records the start step a trainer learned from the pservers.
func (ls *links) learned(step int64) { ls.start.Store(step) }

// send sends v@step to pserver p and records it as the last message of
// that transfer. Both happen under the record's lock, so a recovery of p
// (rejoinPServer, on another op's goroutine) sees either the message
// before or this one, never this one sent but not yet recorded.
func (c *NetComm) send(ctx context.Context, p transport.NodeID, step int64, v string, dt transport.DType, payload []byte) error {
	var m *sentMsg
	if c.links != nil && c.links.by[p] != nil {
		m = c.links.by[p].sent[v]
	}
	if m == nil {
		return c.EP.Send(ctx, p, step, v, dt, payload)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := c.EP.Send(ctx, p, step, v, dt, payload); err != nil {
		return err
	}
	m.note(step, dt, payload)
	return nil
}

// note records the message; the caller holds m.mu.
func (m *sentMsg) note(step int64, dt transport.DType, payload []byte) {
	m.has, m.step, m.dt = true, step, dt
	switch {
	case m.own && m.lent:
		m.payload, m.lent = append([]byte(nil), payload...), false
	case m.own:
		m.payload = append(m.payload[:0], payload...)
	default:
		m.payload = payload
	}
}

// position is where the trainer is with respect to pserver l.
func (ls *links) position(l *link) rejoin.Position {
	start := ls.start.Load()
	if start == rejoin.Learning {
		return rejoin.Position{Sent: rejoin.Learning, Need: rejoin.Learning, Steps: ls.steps, Batch: ls.batch}
	}
	pos := rejoin.Position{Sent: start - 1, Need: math.MaxInt64, Steps: ls.steps, Batch: ls.batch}
	for _, m := range l.sent {
		m.mu.Lock()
		if m.has && !m.request && m.step > pos.Sent {
			pos.Sent = m.step
		}
		m.mu.Unlock()
	}
	for _, got := range l.got {
		need := start
		if k := got.Load(); k != rejoin.Learning {
			need = k + 1
		}
		pos.Need = min(pos.Need, need)
	}
	if pos.Need == math.MaxInt64 { // receives nothing from it
		pos.Need = pos.Sent + 1
	}
	return pos
}

// watched returns a child of ctx cancelled at the next restart of any
// peer, with the restart context it follows. It is made once per restart
// and per ctx (a trainer's, each pserver part's), so a steady-state
// receive allocates nothing.
func (c *NetComm) watched(ctx context.Context) (w, rc context.Context) {
	rc = c.restartCtx(ctx)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	e, ok := c.watches[ctx]
	if !ok || e.rc != rc {
		wc, cancel := context.WithCancel(ctx)
		context.AfterFunc(rc, cancel)
		e = watch{rc: rc, w: wc}
		if c.watches == nil {
			c.watches = map[context.Context]watch{}
		}
		c.watches[ctx] = e
	}
	return e.w, rc
}

// watch is a receive context of one restart epoch (watched).
type watch struct{ rc, w context.Context }

// recvFromPServer receives v@step from pserver p into dst (or, for a
// payload of varying length, into sink) so that it rides out a lost
// pserver: it waits for p to come back, and when p came back as a new
// process brings it up to date (rejoinPServer) before receiving again. A
// restart is noticed even without an error: the receive is woken by it.
func (c *NetComm) recvFromPServer(ctx context.Context, p transport.NodeID, step int64, v string, dst []byte, sink *transport.Prefix) error {
	l := c.links.by[p]
	for {
		gen := l.gen.Load()
		w, rc := c.watched(ctx) // before the checks: a restart after them cancels w
		if err := c.rejoinRestarted(ctx); err != nil {
			return err
		}
		if n, _ := c.EP.Restarts(p); n != l.answered() {
			if _, err := c.recoverPServer(ctx, l, gen, nil); err != nil {
				return err
			}
			if sink != nil { // what arrived from the old process was dropped
				sink.N = 0
			}
			continue
		}
		var err error
		if sink != nil {
			err = c.EP.RecvSink(w, p, step, v, sink)
		} else {
			err = c.EP.Recv(w, p, step, v, dst)
		}
		restarted := err != nil && rc.Err() != nil
		switch {
		case err == nil:
			if got := l.got[v]; got != nil {
				got.Store(step)
			}
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case restarted: // some pserver restarted while we waited: check again
			continue
		case lostPeer(err):
			// The same process back after a blip: what it sent and this
			// trainer lacks is written again (transport resumption), so
			// the receive simply goes on; a restarted one is brought up to
			// date first.
			blip, err := c.recoverPServer(ctx, l, gen, err)
			if err != nil {
				return err
			}
			if !blip && sink != nil {
				sink.N = 0
			}
		default:
			return err
		}
	}
}

// rejoinRestarted brings every pserver that restarted since the last
// check up to date (recoverPServer), whichever pserver this trainer waits
// for. A restarted pserver waits for every trainer's position before it
// serves anyone, and the pserver this trainer waits for may itself wait
// for the restarted one's progress (through the other trainers), so the
// trainer tells it as soon as a restart wakes it. Costs an atomic load
// when nothing restarted.
func (c *NetComm) rejoinRestarted(ctx context.Context) error {
	seen := c.restarted.Load()
	if seen == c.links.checked.Load() {
		return nil
	}
	for _, p := range c.Peers {
		l := c.links.by[p]
		if n, _ := c.EP.Restarts(p); n != l.answered() {
			if _, err := c.recoverPServer(ctx, l, l.gen.Load(), nil); err != nil {
				return err
			}
		}
	}
	c.links.checked.Store(seen)
	return nil
}

func (l *link) answered() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inc
}

// flushLostPServer handles a Flush that failed because pserver p's
// connection is lost: wait for it, and bring it up to date if it restarted.
func (c *NetComm) flushLostPServer(ctx context.Context, p transport.NodeID, cause error) error {
	l := c.links.by[p]
	if l == nil {
		return cause
	}
	_, err := c.recoverPServer(ctx, l, l.gen.Load(), cause)
	return err
}

// recoverPServer waits (up to PServerTimeout) for pserver l to be
// connected. The same process back (a network blip) is reported as blip;
// a new incarnation is told this trainer's position and brought up to
// date. gen is the count of recoveries the caller saw before its failure:
// if another op recovered l since, there is nothing left to do.
func (c *NetComm) recoverPServer(ctx context.Context, l *link, gen int64, cause error) (blip bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen.Load() != gen {
		return false, nil
	}
	if cause != nil && !l.down {
		l.down, l.since = true, time.Now()
		c.Log.Warn().Str("pserver", l.id.String()).Dur("timeout", c.PServerTimeout).Err(cause).Msg("lost a pserver; waiting for it to come back")
	}
	for {
		// A second beyond the timeout: by then the TCP transport, which
		// started counting at the loss, gave the pserver up, and its error
		// names the address (pserverGone asks for it).
		wctx, cancel := context.WithTimeout(ctx, c.PServerTimeout+time.Second)
		err := c.EP.WaitPeer(wctx, l.id)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			return false, c.pserverGone(ctx, l.id, cause, err)
		}
		n, _ := c.EP.Restarts(l.id)
		if n == l.inc {
			if l.down {
				l.down = false
				c.Log.Info().Str("pserver", l.id.String()).Dur("after", time.Since(l.since).Round(time.Millisecond)).Msg("pserver is back (the same process)")
			}
			return true, nil
		}
		again, err := c.rejoinPServer(ctx, l, n)
		if err != nil {
			return false, err
		}
		if again { // lost or restarted again while we talked to it
			continue
		}
		l.inc, l.down = n, false
		l.gen.Add(1)
		return false, nil
	}
}

// rejoinPServer brings incarnation n of pserver l up to date: send it this
// trainer's position, wait for its resume step, re-send the last message
// of each transfer it has not applied. again: it was lost or restarted
// once more meanwhile.
func (c *NetComm) rejoinPServer(ctx context.Context, l *link, n int64) (again bool, err error) {
	rc := c.restartCtx(ctx)
	if m, _ := c.EP.Restarts(l.id); m != n {
		return true, nil
	}
	pos := c.links.position(l)
	pos.Rejoin = true
	ev := c.Log.Warn().Str("pserver", l.id.String())
	if pos.Known() {
		ev = ev.Int64("sent", pos.Sent).Int64("need", pos.Need)
	}
	ev.Msg("pserver restarted (a new process); telling it this trainer's position")
	if err := c.EP.Send(ctx, l.id, CtrlStep, PositionVar, PositionSpec.DType, pos.Bytes()); err != nil {
		return false, fmt.Errorf("telling the restarted %s this trainer's position: %w", l.id, err)
	}
	wctx, cancel := context.WithTimeout(ctx, c.PServerTimeout)
	defer cancel()
	buf := make([]byte, ResumeSpec.Bytes)
	for {
		var woken bool
		woken, err = untilRestart(wctx, rc, func(rctx context.Context) error {
			return c.EP.Recv(rctx, l.id, CtrlStep, ResumeVar, buf)
		})
		if !woken {
			break
		}
		// Woken by a restart: of this pserver again (tell the new one), or
		// of another peer, or the watcher catching up with this one.
		rc = c.restartCtx(ctx)
		if m, _ := c.EP.Restarts(l.id); m != n {
			return true, nil
		}
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return false, ctx.Err()
	case lostPeer(err):
		return true, nil
	case errors.Is(err, context.DeadlineExceeded):
		return false, fmt.Errorf("%s restarted but did not say where it resumes within %v (it waits for every trainer's position; see its log)", l.id, c.PServerTimeout)
	default:
		return false, fmt.Errorf("waiting for the restarted %s: %w", l.id, err)
	}
	s := int64(binary.LittleEndian.Uint64(buf))
	if err := rejoin.ResumeConflict(l.id.String(), pos, s, c.Async); err != nil {
		return false, err
	}
	resent := 0
	for v, m := range l.sent {
		n, err := c.resend(ctx, l.id, v, m, s)
		if err != nil {
			return false, fmt.Errorf("re-sending %s to the restarted %s: %w", v, l.id, err)
		}
		resent += n
	}
	c.Log.Warn().Str("pserver", l.id.String()).Int64("step", s).Int("resent", resent).Msg("the restarted pserver resumes; carrying on")
	return false, nil
}

// resend re-sends to the restarted pserver p, which starts at step s,
// what it lacks of transfer v (planResend decides which steps).
func (c *NetComm) resend(ctx context.Context, p transport.NodeID, v string, m *sentMsg, s int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := rejoin.SentState{Has: m.has, Request: m.request, Step: m.step, Answer: rejoin.Learning}
	if m.answer != nil {
		st.Answer = m.answer.Load()
	}
	steps := rejoin.PlanResend(st, s, c.Async)
	for i, r := range steps {
		var payload []byte
		if r.Last {
			payload = m.payload
			m.lent = true
		}
		if err := c.EP.Send(ctx, p, r.Step, v, m.dt, payload); err != nil {
			return i, err
		}
	}
	return len(steps), nil
}

// pserverGone is the error of a pserver that did not come back.
func (c *NetComm) pserverGone(ctx context.Context, p transport.NodeID, cause, waitErr error) error {
	why := waitErr
	var pe *transport.PeerError
	if !errors.As(waitErr, &pe) {
		// Our own deadline. A transport that gave the peer up (TCP, after
		// its connect timeout) names its address: ask without waiting.
		done, cancel := context.WithCancel(ctx)
		cancel()
		if err := c.EP.WaitPeer(done, p); errors.As(err, &pe) {
			why = err
		} else if cause != nil {
			why = cause
		}
	}
	for errors.As(why, &pe) { // the transport nests its peer errors
		why = pe.Err
	}
	return fmt.Errorf("lost %s and it did not come back within %v (restart it with the same command line, or raise --connect-timeout): %v", p, c.PServerTimeout, why)
}
