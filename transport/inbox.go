package transport

// The inbox and its queues: a transfer's delivered messages wait in its
// varQueue until a recv takes them (recv, recvAny, pending, peek: in
// recv.go); check, rejected and deliver admit what a decoder read; small
// payloads live in recycled buffers. Held large messages are in held.go,
// what the inbox knows of each peer in peers.go.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// inbox holds the messages delivered to one node until its recvs take them.
// Both transports deliver into it, so Recv/RecvAny/Done/stale semantics are
// written once.
//
// A message arrives in one of two ways. A small one (at most eager bytes)
// is read ahead into a recycled buffer and queued; a recv copies it out.
// A large one is held: its decoder queues the header and waits until a
// recv claims it, then reads the payload straight into the receiver's
// tensor or Sink, so a large tensor crosses no intermediate buffer and a
// node's memory does not grow with what its peers send ahead. While it
// waits, the transport's flow control holds the sender back.
//
// Per (peer, transfer) stream the inbox counts the messages fully received
// and, for a held message, the payload bytes already consumed. After a lost
// connection these counts tell the sender exactly what to write again, and
// from which byte (docs/wire.md, resumption), so a Sink that reduces or
// applies a tensor chunk by chunk never sees a byte twice.
type inbox struct {
	self    NodeID
	peers   []NodeID // the nodes RecvAny waits on
	onError func(error)
	onBye   func() // a peer said goodbye (TCP: Close may stop waiting)
	eager   int    // payloads up to this size are read ahead

	// parks counts the recvs that waited for a message (parkWait): a
	// Send that follows one writes its message itself (msgWriter.add).
	parks atomic.Int64

	mu      sync.Mutex
	specs   map[string]Spec
	vars    map[string]*varQueue
	free    map[int][][]byte
	peer    map[NodeID]*peerState
	floor   int64 // messages for steps below are stale
	closed  bool
	closing chan struct{}   // closed by close
	waiters []chan struct{} // free list
	claims  []*claim        // free list
}

// A Sink consumes a message's payload in order as it arrives, so a
// receiver can reduce or apply a large tensor without a buffer of its
// size. Its methods are called by the transport, one at a time, while the
// Recv that passed it is blocked.
type Sink interface {
	// Next returns the buffer the payload bytes from offset off are read
	// into; its length is at least 1 (the transport reads at most the
	// bytes that remain).
	Next(off int) []byte
	// Filled reports that buf, a prefix of what Next(off) returned, holds
	// the payload bytes [off, off+len(buf)).
	Filled(off int, buf []byte)
}

type entry struct {
	step int64
	src  NodeID
	buf  []byte // a read-ahead payload; nil for a held message
	h    *held
	bad  error // a rejected message: the recv taking it fails with this
}

type varQueue struct {
	items   []entry
	waiting []chan struct{}
	claims  []*claim
}

// claim is a recv waiting for one message with its memory: the message's
// arrival copies the payload straight into dst and fills the claim
// (arriveLocked, deliver), so the recv wakes with its message in place.
type claim struct {
	src  NodeID
	step int64
	dst  []byte
	wake chan struct{} // the recv's wait channel
	got  bool
}

// claimOf is the claim waiting for src's message of step with n bytes.
func (q *varQueue) claimOf(src NodeID, step int64, n int) *claim {
	for _, c := range q.claims {
		if c.src == src && c.step == step && len(c.dst) == n {
			return c
		}
	}
	return nil
}

// fill marks c's message as copied into its memory and wakes its recv,
// which takes it as it would have from the queue: older messages of its
// source still pending are dropped as stale.
func (in *inbox) fill(q *varQueue, c *claim) {
	for i := 0; i < len(q.items); i++ {
		if e := q.items[i]; e.src == c.src && e.step < c.step {
			if e.bad == nil { // a rejection was reported when it arrived
				in.onError(fmt.Errorf("message %s@%d from %s: stale (wanted step %d), dropped", in.varName(q), e.step, c.src, c.step))
			}
			in.dropEntry(q, i)
			i--
		}
	}
	c.got = true
	q.unclaim(c)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (q *varQueue) unclaim(c *claim) {
	for i, x := range q.claims {
		if x == c {
			q.claims = append(q.claims[:i], q.claims[i+1:]...)
			return
		}
	}
}

var (
	errStopped = errors.New("transport: claim withdrawn")
	errDropped = errors.New("transport: message dropped as stale while being received")
	// errStale marks a message of an older incarnation of its sender.
	errStale = fmt.Errorf("transport: message of an older incarnation of its sender, dropped")
)

// defaultEager is the largest payload read ahead of its recv.
const defaultEager = 64 << 10

func newInbox(self NodeID, peers []NodeID, onError func(error)) *inbox {
	in := &inbox{
		self: self, peers: peers, onError: onError, eager: defaultEager,
		specs: map[string]Spec{}, vars: map[string]*varQueue{},
		free: map[int][][]byte{}, peer: map[NodeID]*peerState{},
		floor: -1 << 62, closing: make(chan struct{}),
	}
	for _, p := range peers {
		in.peer[p] = &peerState{doneAt: -1, restarted: make(chan struct{}), live: make(chan struct{}), streams: map[string]*streamState{}}
	}
	if in.onError == nil {
		in.onError = func(error) {}
	}
	return in
}

func (in *inbox) accept(specs []Spec) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, s := range specs {
		in.specs[s.Var] = s
		if in.vars[s.Var] == nil {
			in.vars[s.Var] = &varQueue{}
		}
	}
}

// check validates a message header before its payload is read, so a bad
// frame costs no allocation. n is the whole payload's size.
func (in *inbox) check(src NodeID, inc uint64, step int64, v string, dt DType, n int) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.checkLocked(src, inc, step, v, dt, n)
}

func (in *inbox) checkLocked(src NodeID, inc uint64, step int64, v string, dt DType, n int) error {
	s, ok := in.specs[v]
	switch {
	case in.closed:
		return ErrClosed
	case in.peer[src] == nil:
		return fmt.Errorf("message %s@%d from %s: %w", v, step, src, ErrUnknownPeer)
	case in.peer[src].inc != inc:
		return fmt.Errorf("message %s@%d from %s: %w", v, step, src, errStale)
	case !ok:
		return fmt.Errorf("message %s@%d from %s: %s does not receive a transfer named %q", v, step, src, in.self, v)
	case s.DType != dt:
		return fmt.Errorf("message %s@%d from %s: dtype %d, %s expects %d", v, step, src, dt, in.self, s.DType)
	case s.AtMost && n > s.Bytes:
		return fmt.Errorf("message %s@%d from %s: %d bytes, %s expects at most %d", v, step, src, n, in.self, s.Bytes)
	case !s.AtMost && s.Bytes != n:
		return fmt.Errorf("message %s@%d from %s: %d bytes, %s expects %d", v, step, src, n, in.self, s.Bytes)
	}
	// A stale step is not rejected here: deliver and hold drop it, and
	// count it on its stream, which a resumed message needs.
	return nil
}

// readAhead reports whether a message of n bytes on stream v from src is
// read into a buffer (no held message is pending on that stream).
func (in *inbox) readAhead(src NodeID, v string, n int) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if n > in.eager {
		return false
	}
	ps := in.peer[src]
	return ps == nil || ps.streams[v] == nil || ps.streams[v].head == nil
}

// buffer returns a recycled buffer of n bytes.
func (in *inbox) buffer(n int) []byte {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.bufferLocked(n)
}

// bufferLocked returns a buffer of n bytes from the free list of its size
// class (n rounded up to a power of two), so messages whose size varies
// from step to step (lists of rows) reuse buffers too.
func (in *inbox) bufferLocked(n int) []byte {
	c := sizeClass(n)
	if l := in.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		in.free[c] = l[:len(l)-1]
		return b[:n]
	}
	return make([]byte, n, c)
}

func sizeClass(n int) int {
	c := 64
	for c < n {
		c *= 2
	}
	return c
}

func (in *inbox) recycle(b []byte) {
	if c := cap(b); c == sizeClass(c) {
		in.free[c] = append(in.free[c], b)
	}
}

// recycleBuf returns a buffer taken by buffer but never delivered.
func (in *inbox) recycleBuf(b []byte) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.recycle(b)
}

// counted records that a message of stream v from src was fully received
// (arrived says it also counts toward the peer's Done count).
func (in *inbox) counted(ps *peerState, v string, arrived bool) {
	ps.stream(v).count++
	if arrived {
		ps.delivered++
	}
	if ps.doneAt >= 0 {
		in.wakeAll() // the peer may now count as finished
	}
}

// rejected counts a message of stream from src that failed check (why)
// as received, so the count announced by Done and the stream's count
// still add up. For a transfer this node receives, it queues the
// rejection in the message's place: the sender will not send that
// message again, so a recv waiting for it fails with why instead of
// waiting forever.
func (in *inbox) rejected(src NodeID, inc uint64, stream string, step int64, v string, why error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.rejectedLocked(src, inc, stream, step, v, why)
}

func (in *inbox) rejectedLocked(src NodeID, inc uint64, stream string, step int64, v string, why error) {
	ps := in.current(src, inc)
	if ps == nil {
		return
	}
	in.counted(ps, stream, true)
	if q := in.vars[v]; q != nil && !in.closed && step >= in.floor {
		q.items = append(q.items, entry{step: step, src: src, bad: fmt.Errorf("%w: %v", ErrRejected, why)})
		wake(q)
	}
}

// deliver hands a checked, read-ahead message of stream to the inbox; buf
// is owned by it after.
func (in *inbox) deliver(src NodeID, inc uint64, stream string, step int64, v string, buf []byte) {
	in.mu.Lock()
	defer in.mu.Unlock()
	q := in.vars[v]
	ps := in.current(src, inc)
	if in.closed || q == nil || ps == nil { // an older incarnation's message is never delivered
		in.recycle(buf)
		return
	}
	in.counted(ps, stream, true)
	if step < in.floor {
		in.recycle(buf)
		in.onError(fmt.Errorf("message %s@%d from %s: stale, dropped", v, step, src))
		return
	}
	if c := q.claimOf(src, step, len(buf)); c != nil {
		copy(c.dst, buf)
		in.recycle(buf)
		in.fill(q, c)
		return
	}
	q.items = append(q.items, entry{step: step, src: src, buf: buf})
	wake(q)
}

// arriveLocked admits a message of stream whose payload the caller keeps
// (a frame in the message stream's read buffer, an in-memory send): it
// checks it, then copies the payload straight into the memory of the recv
// waiting for it, or else into a recycled buffer queued for its recv. A
// message that fails the check is returned as the error, for the caller
// to report and count (rejectedLocked).
func (in *inbox) arriveLocked(src NodeID, inc uint64, stream string, step int64, v string, dt DType, payload []byte) error {
	if err := in.checkLocked(src, inc, step, v, dt, len(payload)); err != nil {
		return err
	}
	if in.closed {
		return ErrClosed
	}
	ps, q := in.current(src, inc), in.vars[v]
	in.counted(ps, stream, true)
	if step < in.floor {
		in.onError(fmt.Errorf("message %s@%d from %s: stale, dropped", v, step, src))
		return nil
	}
	if c := q.claimOf(src, step, len(payload)); c != nil {
		copy(c.dst, payload)
		in.fill(q, c)
		return nil
	}
	buf := in.bufferLocked(len(payload))
	copy(buf, payload)
	q.items = append(q.items, entry{step: step, src: src, buf: buf})
	wake(q)
	return nil
}

// dropEntry removes a queued entry that became stale.
func (in *inbox) dropEntry(q *varQueue, i int) {
	e := q.items[i]
	if e.h != nil {
		in.drop(e.h) // unqueues it
		return
	}
	in.recycle(e.buf)
	q.items = append(q.items[:i], q.items[i+1:]...)
}

func (in *inbox) close() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.closed {
		close(in.closing)
	}
	in.closed = true
	for _, q := range in.vars {
		for _, e := range q.items {
			if e.h != nil {
				e.h.discard = true
				if e.h.claimed && !e.h.reader {
					e.h.claimed = false
					e.h.fin <- ErrClosed
				}
				select {
				case e.h.wake <- struct{}{}:
				default:
				}
			}
		}
	}
	in.wakeAll()
}

func wake(q *varQueue) {
	for _, c := range q.waiting {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (in *inbox) wakeAll() {
	for _, q := range in.vars {
		wake(q)
	}
}
