package transport

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// Inmem is the in-memory twin of the TCP transport: the same inbox
// semantics, with delivery by copying into the receiver's buffers.
type Inmem struct {
	self NodeID
	inc  uint64
	hub  *Hub
	in   *inbox

	mu   sync.Mutex
	sent map[NodeID]sentTo

	sentBytes, recvBytes atomic.Int64 // payload (Traffic)
}

// sentTo counts the messages sent to one incarnation of a peer (what Done
// announces to it). Keyed by the incarnation the message went to, a send
// racing the peer's Restart counts toward the old incarnation, never
// toward the new one, which would then wait for a message it never gets.
type sentTo struct {
	inc uint64
	n   int64
}

// Hub connects the in-memory endpoints of one job.
type Hub struct {
	mu      sync.Mutex
	nodes   map[NodeID]*Inmem
	onError func(error)
}

// NewHub makes endpoints for the given nodes; each trainer peers with every
// pserver and vice versa (as in a job; trainers do not talk to each other).
// onError receives rejected messages (nil: ignore).
func NewHub(onError func(error), ids ...NodeID) *Hub {
	h := &Hub{nodes: map[NodeID]*Inmem{}}
	for _, id := range ids {
		var peers []NodeID
		for _, o := range ids {
			if o != id && peersOf(id, o) {
				peers = append(peers, o)
			}
		}
		h.nodes[id] = &Inmem{self: id, inc: newIncarnation(), hub: h, in: newInbox(id, peers, onError), sent: map[NodeID]sentTo{}}
	}
	for _, e := range h.nodes {
		for _, p := range e.in.peers {
			e.in.connected(p, h.nodes[p].inc)
		}
	}
	h.onError = onError
	return h
}

// Restart replaces node id by a new incarnation with a clean state (as a
// restarted process): its peers drop what the old one sent and the old
// endpoint's later sends are never delivered. The new endpoint accepts
// the given transfers before its peers see it (as Config.Accept on TCP).
func (h *Hub) Restart(id NodeID, accept ...Spec) *Inmem {
	h.mu.Lock()
	old := h.nodes[id]
	e := &Inmem{self: id, inc: newIncarnation(), hub: h, in: newInbox(id, old.in.peers, h.onError), sent: map[NodeID]sentTo{}}
	e.in.accept(accept)
	for _, p := range e.in.peers { // before any peer can send to it
		e.in.connected(p, h.nodes[p].inc)
	}
	h.nodes[id] = e
	peers := h.nodes
	h.mu.Unlock()
	for _, p := range e.in.peers {
		if peers[p].in.connected(id, e.inc) {
			peers[p].in.onError(&PeerError{id, ErrPeerRestarted})
		}
	}
	return e
}

func peersOf(a, b NodeID) bool {
	return a.Role != b.Role
}

// Endpoint returns the endpoint of node id.
func (h *Hub) Endpoint(id NodeID) *Inmem {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nodes[id]
}

func (e *Inmem) Self() NodeID                { return e.self }
func (e *Inmem) Accept(specs ...Spec)        { e.in.accept(specs) }
func (e *Inmem) DropBefore(step int64)       { e.in.dropBefore(step) }
func (e *Inmem) Flush(context.Context) error { return nil }

func (e *Inmem) peer(to NodeID) (*Inmem, error) {
	p := e.hub.Endpoint(to)
	if p == nil || p.in.peer[e.self] == nil {
		return nil, &PeerError{to, ErrUnknownPeer}
	}
	return p, nil
}

func (e *Inmem) Send(ctx context.Context, to NodeID, step int64, v string, dt DType, payload []byte) error {
	p, err := e.peer(to)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	e.count(to, p.inc, 1)
	// Counted as TCP counts it: the payload crossed, whether the peer
	// accepts it or not.
	e.sentBytes.Add(int64(len(payload)))
	p.recvBytes.Add(int64(len(payload)))
	// Copied into the recv waiting for it, or into a buffer queued for it.
	in := p.in
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := in.arriveLocked(e.self, e.inc, v, step, v, dt, payload); err != nil {
		in.onError(err)
		in.rejectedLocked(e.self, e.inc, v, step, v, err) // counted, as a rejected frame is on TCP
	}
	return nil
}

func (e *Inmem) Recv(ctx context.Context, src NodeID, step int64, v string, dst []byte) error {
	return e.in.recv(ctx, src, step, v, dst, nil)
}

func (e *Inmem) RecvSink(ctx context.Context, src NodeID, step int64, v string, sink Sink) error {
	return e.in.recv(ctx, src, step, v, nil, sink)
}

func (e *Inmem) RecvAny(ctx context.Context, v string, dst []byte) (Key, error) {
	return e.in.recvAny(ctx, v, dst, nil)
}

func (e *Inmem) RecvAnySink(ctx context.Context, v string, sink Sink) (Key, error) {
	return e.in.recvAny(ctx, v, nil, sink)
}

func (e *Inmem) Pending(ctx context.Context, vs []string) (string, error) {
	return e.in.pending(ctx, vs)
}

// Abort tells to that this node stopped the job, and why.
func (e *Inmem) Abort(_ context.Context, to NodeID, reason string) error {
	p, err := e.peer(to)
	if err != nil {
		return err
	}
	p.in.abort(e.self, e.inc, reason)
	return nil
}

func (e *Inmem) Done(_ context.Context, to NodeID) error {
	p, err := e.peer(to)
	if err != nil {
		return err
	}
	p.in.done(e.self, e.inc, e.count(to, p.inc, 0))
	return nil
}

// count adds add messages to those sent to incarnation inc of to and
// returns how many went to it.
func (e *Inmem) count(to NodeID, inc uint64, add int64) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.sent[to]
	if c.inc != inc {
		c = sentTo{inc: inc}
	}
	c.n += add
	e.sent[to] = c
	return c.n
}

func (e *Inmem) WaitDone(ctx context.Context, peer NodeID) error {
	return e.in.waitDone(ctx, peer)
}

func (e *Inmem) WaitPeer(ctx context.Context, peer NodeID) error { return e.in.waitPeer(ctx, peer) }

// Traffic reports the payload bytes this endpoint sent and received; the
// in-memory twin has no wire, so WireSent and WireRecv are 0.
func (e *Inmem) Traffic() Traffic {
	return Traffic{Sent: e.sentBytes.Load(), Recv: e.recvBytes.Load()}
}

func (e *Inmem) Restarts(peer NodeID) (int64, <-chan struct{}) { return e.in.restarts(peer) }

func (e *Inmem) Peek(ctx context.Context, src NodeID, v string) (int64, error) {
	return e.in.peek(ctx, src, v)
}

// Close closes this endpoint; peers see it as failed unless it said Done.
func (e *Inmem) Close() error {
	e.in.close()
	e.hub.mu.Lock()
	current := e.hub.nodes[e.self] == e
	nodes := e.hub.nodes
	e.hub.mu.Unlock()
	if !current { // replaced by Restart: its peers already moved on
		return nil
	}
	for id, p := range nodes {
		if id != e.self && p.in.peer[e.self] != nil {
			p.in.fail(e.self, fmt.Errorf("closed"))
		}
	}
	return nil
}

var _ Endpoint = (*Inmem)(nil)
