package comm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/rejoin"
	"github.com/psgraph/psgraph/transport"
)

// Trainer is a trainer's communication: the kernels.Rendezvous of its
// program and what its loop needs (Flush, Finish, AwaitPeers, StopJob,
// LearnStep). It remembers what it sent each pserver and the last step it
// received of each transfer, to tell a restarted pserver where it is and
// send it again what the restart lost; the decisions are rejoin.Link's,
// one per pserver (rejoin.go).
type Trainer struct {
	node
	start        atomic.Int64 // the trainer's first step (rejoin.Learning until known)
	steps, batch int64
	links        map[transport.NodeID]*link // built by Join; read-only after
	joined       bool                       // Join ran: a lost pserver is waited for
	// told is the sum over the links of the incarnation each holds this
	// trainer's position: equal to the watch's epoch when every pserver is
	// up to date (rejoinRestarted's one-load check).
	told atomic.Int64
	// pulls numbers the trainer's pulls (pull.go).
	pulls pullSeq
}

// link is the trainer's memory of one pserver: its protocol state, what it
// last sent on each transfer and the last step it received of each.
type link struct {
	id   transport.NodeID
	mu   sync.Mutex  // one recovery at a time; guards m and since
	m    rejoin.Link // the protocol state
	told atomic.Int64
	// since is when the pserver was lost (for the log).
	since time.Time
	sent  map[string]*sentMsg
	got   map[string]*atomic.Int64 // last step received, rejoin.Learning before any
	// replies are the transfers of got the pserver sends in reply to the
	// step's gradients (clip.norm's partial norm): rejoin.Where's replies.
	replies map[string]bool
}

// sentMsg is the last message sent on one transfer. Its payload is the
// tensor's memory, which stays intact until the trainer received this
// pserver's next parameters (the gradient is computed from them, and they
// come only once the pserver has the re-sent gradient); a transfer
// computed without them keeps a copy (own), in a new buffer once the old
// one was re-sent (lent: the transport may still be writing it).
//
// A request (a table's ids) is not a gradient: it does not count toward
// the trainer's position, and answer is the last step of the reply it
// asks for (the table's rows), so a restarted pserver gets requests for
// the steps it will serve that the trainer still waits for.
type sentMsg struct {
	mu      sync.Mutex
	has     bool
	step    int64
	dt      ir.DType
	payload []byte
	own     bool
	lent    bool
	request bool
	answer  *atomic.Int64
	// counted: a dynamic table's request, kept (copied) with the one
	// before it (prev, of prevStep), for a restarted shard to count their
	// sightings again (rejoin.SentState.Counted).
	counted  bool
	prev     []byte
	prevStep int64
	hasPrev  bool
}

// NewTrainer returns the communication of a trainer with these pservers.
// Join must be called before it is used.
func NewTrainer(cfg Config, pservers []transport.NodeID) *Trainer {
	return &Trainer{node: newNode(cfg, pservers)}
}

// Join sets up the trainer's memory of its pservers from its graph's
// transfer table and sends every pserver its position: start-1, or
// Learning when start < 0 (it learns its start step from the pservers).
func (c *Trainer) Join(ctx context.Context, g *dsl.Graph, start int64, steps, batch int) error {
	c.steps, c.batch = int64(steps), int64(batch)
	if start < 0 {
		start = rejoin.Learning
	}
	c.start.Store(start)
	c.links, c.joined = map[transport.NodeID]*link{}, true
	for _, p := range c.peers {
		c.links[p] = &link{id: p, m: rejoin.Link{Peer: p.String(), Async: c.async}, sent: map[string]*sentMsg{}, got: map[string]*atomic.Int64{},
			replies: map[string]bool{}}
	}
	ts := c.transfers
	// What the trainer receives from each pserver first: a request's
	// record points at the step of its reply.
	for _, t := range ts {
		if !t.Recv || t.Peer.Role != ir.PServerRole {
			continue
		}
		l, err := c.linkOf(t)
		if err != nil {
			return err
		}
		got := &atomic.Int64{}
		got.Store(rejoin.Learning)
		l.got[t.Var] = got
		l.replies[t.Var] = t.Kind == dsl.ClipPartTransfer
	}
	prod, fed := g.Producers(), receivedFrom(ts)
	for _, t := range ts {
		if t.Recv || t.Peer.Role != ir.PServerRole {
			continue
		}
		l, err := c.linkOf(t)
		if err != nil {
			return err
		}
		if t.Kind.Request() { // a table's ids: answered by its rows
			sh := t.Op.Attrs.Ints("shape")
			l.sent[t.Var] = &sentMsg{request: true, answer: l.got[ops.TableRows(t.Table)], counted: len(sh) == 2 && sh[0] == ir.DynamicRows}
			continue
		}
		l.sent[t.Var] = &sentMsg{own: !fedBy(g, prod, t.Op.Inputs[0], fed[t.Peer])}
	}
	for _, p := range c.peers {
		l := c.links[p]
		n := c.incarnation(p)
		if err := c.ep.Send(ctx, p, CtrlStep, PositionVar, PositionSpec.DType, c.position(l).Bytes()); err != nil {
			return fmt.Errorf("telling %s this trainer's position: %w", p, err)
		}
		l.m.Told = n
		l.told.Store(n)
		c.told.Add(n)
	}
	return nil
}

// linkOf is the link to the pserver of transfer t.
func (c *Trainer) linkOf(t dsl.Transfer) (*link, error) {
	if t.Kind.Table() && t.Op.Attrs.Int("shards") != len(c.peers) {
		return nil, dsl.Errorf(t.Op.Pos, "%s: table %s is sharded over %d pservers, but this job has %d", t.Op.Type, t.Table, t.Op.Attrs.Int("shards"), len(c.peers))
	}
	l := c.links[t.Peer]
	if l == nil {
		return nil, dsl.Errorf(t.Op.Pos, "%s: %s is not a pserver of this job", t.Op.Type, t.Peer.Attr())
	}
	return l, nil
}

// fedBy reports whether variable v is computed from a variable in fed,
// what a pserver sends this trainer (receivedFrom), so its memory cannot
// be overwritten before that pserver's next parameters arrived.
func fedBy(g *dsl.Graph, prod map[string]int, v string, fed map[string]bool) bool {
	return g.ComputedFrom(prod, v, func(x string) bool { return fed[x] })
}

// receivedFrom lists, per pserver, the variables of the trainer's graph
// that the transfer table ts receives from it: the outputs of its recv
// ops from that pserver, and a table's fetched rows, which come from
// every pserver.
func receivedFrom(ts []dsl.Transfer) map[ir.Node]map[string]bool {
	out := map[ir.Node]map[string]bool{}
	rows := map[string]bool{}
	for _, t := range ts {
		if t.Recv && t.Kind == dsl.TableRowsTransfer {
			for _, o := range t.Op.Outputs {
				rows[o] = true
			}
		}
	}
	for _, t := range ts {
		if t.Peer.Role != ir.PServerRole || out[t.Peer] != nil {
			continue
		}
		m := maps.Clone(rows)
		for _, u := range ts {
			if u.Recv && u.Peer == t.Peer && u.Kind != dsl.TableRowsTransfer {
				for _, o := range u.Op.Outputs {
					m[o] = true
				}
			}
		}
		out[t.Peer] = m
	}
	return out
}

// position is where the trainer is with respect to pserver l
// (rejoin.Where, from its records).
func (c *Trainer) position(l *link) rejoin.Position {
	sent := make([]rejoin.SentState, 0, len(l.sent))
	for _, m := range l.sent {
		m.mu.Lock()
		sent = append(sent, rejoin.SentState{Has: m.has, Request: m.request, Step: m.step})
		m.mu.Unlock()
	}
	var got, replies []int64
	for v, k := range l.got {
		if l.replies[v] {
			replies = append(replies, k.Load())
		} else {
			got = append(got, k.Load())
		}
	}
	return rejoin.Where(c.start.Load(), sent, got, replies, c.steps, c.batch)
}

// Send implements kernels.Rendezvous: it queues v@step for pserver to and
// records it as the last message of that transfer. Both happen under the
// record's lock, so a recovery of the pserver (on another op's goroutine)
// sees either the message before or this one, never this one sent but not
// yet recorded.
func (c *Trainer) Send(ctx context.Context, step int64, to ir.Node, v string, dt ir.DType, payload []byte) error {
	if to.Role != ir.PServerRole || to.Index < 0 {
		return fmt.Errorf("send %s: a trainer sends to one pserver, not %s", v, to.Attr())
	}
	var m *sentMsg
	if l := c.links[to]; l != nil {
		m = l.sent[v]
	}
	if m == nil {
		return c.ep.Send(ctx, to, step, v, dt, payload)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := c.ep.Send(ctx, to, step, v, dt, payload); err != nil {
		return err
	}
	m.note(step, dt, payload)
	return nil
}

// note records the message; the caller holds m.mu.
func (m *sentMsg) note(step int64, dt ir.DType, payload []byte) {
	if m.counted {
		m.noteCounted(step, dt, payload)
		return
	}
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

// noteCounted records a counted request by copy, keeping the one before;
// a buffer lent to a resend is not written again (the caller holds m.mu).
func (m *sentMsg) noteCounted(step int64, dt ir.DType, payload []byte) {
	reuse := m.prev
	if m.lent {
		reuse, m.lent = nil, false
	}
	if m.has {
		m.prev, m.prevStep, m.hasPrev = m.payload, m.step, true
	}
	m.payload = append(reuse[:0], payload...)
	m.has, m.step, m.dt = true, step, dt
}

// Recv implements kernels.Rendezvous: v@step from pserver from. With a
// timeout it rides out a lost or restarted pserver (recvFromPServer).
func (c *Trainer) Recv(ctx context.Context, step int64, from ir.Node, v string, dst []byte) (int, error) {
	sink := c.prefix(v, dst)
	defer release(sink)
	if c.timeout > 0 && c.joined {
		return c.recvFromPServer(ctx, from, step, v, dst, sink)
	}
	return c.recvInto(ctx, from, step, v, dst, sink)
}

// Flush waits until every message handed to Send was written, so its
// memory may change again. A pserver lost meanwhile is waited for and, if
// it restarted, brought up to date.
func (c *Trainer) Flush(ctx context.Context) error {
	for {
		err := c.ep.Flush(ctx)
		var pe *transport.PeerError
		if !lostPeer(err) || !errors.As(err, &pe) || c.timeout <= 0 || c.links[pe.Peer] == nil {
			return err
		}
		if err := c.recover(ctx, c.links[pe.Peer], err); err != nil {
			return err
		}
	}
}

// Finish flushes (riding out a pserver lost at the end too) and tells
// every pserver this trainer is done.
func (c *Trainer) Finish(ctx context.Context) error {
	if err := c.Flush(ctx); err != nil {
		return err
	}
	return c.done(ctx)
}

// LearnStep is the step a (re)started trainer joins at: it waits until a
// parameter message is pending for every parameter its graph receives and
// returns the newest of their oldest steps. The pservers send their
// parameters for the step they are at and the two before (their parts may
// be two steps apart: rejoin.Part), so at that step every recv finds its
// message.
func (c *Trainer) LearnStep(ctx context.Context) (int64, error) {
	step, any := int64(0), false
	for _, t := range c.transfers {
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
	c.start.Store(step)
	return step, nil
}

// peek is Endpoint.Peek riding out a lost connection to the pserver (the
// same wait as a receive: up to the timeout for it to come back).
func (c *Trainer) peek(ctx context.Context, p transport.NodeID, v string) (int64, error) {
	for {
		k, err := c.ep.Peek(ctx, p, v)
		if err == nil || !lostPeer(err) {
			return k, err
		}
		if werr := c.waitBack(ctx, p); werr != nil {
			if c.timeout <= 0 || ctx.Err() != nil {
				return 0, err
			}
			return 0, c.pserverGone(p, err, werr)
		}
	}
}

var _ kernels.Rendezvous = (*Trainer)(nil)
