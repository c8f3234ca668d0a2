package transport

// The inbox and its queues: a transfer's delivered messages wait in its
// varQueue until a recv takes them (recv, recvAny, pending, peek); check,
// rejected and deliver admit what a decoder read; small payloads live in
// recycled buffers. Held large messages are in held.go, what the inbox
// knows of each peer in peers.go.

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// wait parks the caller until something changes for one of qs or ctx
// ends. It is called with in.mu held and returns with it held.
func (in *inbox) wait(ctx context.Context, qs ...*varQueue) error {
	_, err := in.parkWait(ctx, nil, qs)
	return err
}

// waitClaim is wait for a recv of src's message of step of q into dst: the
// message may be copied into dst while it waits (got).
func (in *inbox) waitClaim(ctx context.Context, q *varQueue, src NodeID, step int64, dst []byte) (got bool, err error) {
	var c *claim
	if n := len(in.claims); n > 0 {
		c, in.claims = in.claims[n-1], in.claims[:n-1]
	} else {
		c = &claim{}
	}
	c.src, c.step, c.dst, c.got = src, step, dst, false
	got, err = in.parkWait(ctx, c, []*varQueue{q})
	c.dst, c.wake = nil, nil
	in.claims = append(in.claims, c)
	if got {
		return true, nil
	}
	return false, err
}

// parkWait waits on qs (and, with c, registers c on qs[0]) until woken or ctx
// ends; called with in.mu held, it returns with it held. It reports
// whether c was filled.
func (in *inbox) parkWait(ctx context.Context, c *claim, qs []*varQueue) (bool, error) {
	var ch chan struct{}
	if n := len(in.waiters); n > 0 {
		ch, in.waiters = in.waiters[n-1], in.waiters[:n-1]
	} else {
		ch = make(chan struct{}, 1)
	}
	for _, q := range qs {
		q.waiting = append(q.waiting, ch)
	}
	if c != nil {
		c.wake = ch
		qs[0].claims = append(qs[0].claims, c)
	}
	in.mu.Unlock()
	var err error
	select {
	case <-ch:
	case <-ctx.Done():
		err = ctx.Err()
	}
	in.mu.Lock()
	for _, q := range qs {
		for i, w := range q.waiting {
			if w == ch {
				q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
				break
			}
		}
	}
	got := false
	if c != nil {
		qs[0].unclaim(c)
		got = c.got
	}
	select { // drain a wake-up that raced with ctx
	case <-ch:
	default:
	}
	in.waiters = append(in.waiters, ch)
	return got, err
}

// take hands entry i of q to the receiver (dst, or sink when set). For a
// held message it waits, unlocking, until the decoder read it; called
// with in.mu held, it returns with it held. retry says the entry changed
// under the wait (withdrawn or dropped): look again. A connection lost
// under it fails the recv with the peer's error; a recv with the same
// receiver after the reconnect takes up the rest.
func (in *inbox) take(ctx context.Context, q *varQueue, i int, dst []byte, sink Sink) (retry bool, err error) {
	e := q.items[i]
	if e.bad != nil {
		q.items = append(q.items[:i], q.items[i+1:]...)
		return false, e.bad
	}
	if e.h == nil {
		q.items = append(q.items[:i], q.items[i+1:]...)
		defer in.recycle(e.buf)
		if sink == nil {
			if len(dst) != len(e.buf) {
				return false, fmt.Errorf("recv %s@%d from %s: %d bytes into a %d-byte tensor", in.varName(q), e.step, e.src, len(e.buf), len(dst))
			}
			copy(dst, e.buf)
			return false, nil
		}
		for off := 0; off < len(e.buf); {
			b := sink.Next(off)
			k := copy(b, e.buf[off:])
			sink.Filled(off, b[:k])
			off += k
		}
		return false, nil
	}
	h := e.h
	if sink == nil && len(dst) != h.n {
		return false, fmt.Errorf("recv %s@%d from %s: %d bytes into a %d-byte tensor", h.v, h.step, h.src, h.n, len(dst))
	}
	var first *byte
	if len(dst) > 0 {
		first = &dst[0]
	}
	if h.off > 0 && (h.firstSink != sink || h.firstDst != first) {
		return false, fmt.Errorf("recv %s@%d from %s: %d of its bytes went to another receiver", h.v, h.step, h.src, h.off)
	}
	h.firstSink, h.firstDst = sink, first
	h.claimed, h.stop, h.dst, h.sink = true, false, dst, sink
	select {
	case h.wake <- struct{}{}:
	default:
	}
	in.mu.Unlock()
	var res error
	select {
	case res = <-h.fin:
	case <-ctx.Done():
		in.mu.Lock()
		h.stop = true
		select {
		case h.wake <- struct{}{}:
		default:
		}
		in.mu.Unlock()
		res = <-h.fin // the decoder stops at its next chunk
		if res == nil {
			break
		}
		in.mu.Lock()
		return false, ctx.Err()
	}
	in.mu.Lock()
	switch {
	case res == nil:
		return false, nil
	case errors.Is(res, errDropped), errors.Is(res, errStopped):
		return true, nil
	}
	// Otherwise the connection was lost under it (a PeerError: the
	// message is parked; the same receiver takes it up again after the
	// reconnect) or the endpoint closed.
	return false, res
}

func (in *inbox) varName(q *varQueue) string {
	for v, x := range in.vars {
		if x == q {
			return v
		}
	}
	return "?"
}

func (in *inbox) recv(ctx context.Context, src NodeID, step int64, v string, dst []byte, sink Sink) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	q := in.vars[v]
	ps := in.peer[src]
	switch {
	case ps == nil:
		return &PeerError{src, ErrUnknownPeer}
	case q == nil:
		return fmt.Errorf("recv %s: %s does not accept a transfer named %q (not in the plan)", src, in.self, v)
	}
scan:
	for {
		if in.closed {
			return ErrClosed
		}
		for i := 0; i < len(q.items); i++ {
			e := q.items[i]
			if e.src != src {
				continue
			}
			if e.step < step {
				if e.bad == nil { // a rejection was reported when it arrived
					in.onError(fmt.Errorf("message %s@%d from %s: stale (wanted step %d), dropped", v, e.step, src, step))
				}
				in.dropEntry(q, i)
				i--
				continue
			}
			if e.step == step && claimable(e) {
				retry, err := in.take(ctx, q, i, dst, sink)
				if retry {
					continue scan
				}
				return err
			}
		}
		if in.finished(ps) {
			return &PeerError{src, ErrPeerDone}
		}
		if err := ps.failure(); err != nil {
			return &PeerError{src, err}
		}
		in.spillBlockers(q, src, step)
		if sink != nil {
			if err := in.wait(ctx, q); err != nil {
				return err
			}
			continue
		}
		if got, err := in.waitClaim(ctx, q, src, step, dst); got || err != nil {
			return err
		}
	}
}

func (in *inbox) recvAny(ctx context.Context, v string, dst []byte, sink Sink) (Key, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	q := in.vars[v]
	if q == nil {
		return Key{}, fmt.Errorf("recv %s: %s does not accept a transfer named %q (not in the plan)", v, in.self, v)
	}
scan:
	for {
		if in.closed {
			return Key{}, ErrClosed
		}
		for i, e := range q.items {
			if !claimable(e) {
				continue
			}
			retry, err := in.take(ctx, q, i, dst, sink)
			if retry {
				continue scan
			}
			// On an error the key still names the message: if its
			// connection was lost part-way, Recv/RecvSink of that key
			// with the same receiver takes up the rest.
			return Key{Step: e.step, Var: v, Src: e.src}, err
		}
		all := true
		for _, p := range in.peers {
			ps := in.peer[p]
			if in.finished(ps) {
				continue
			}
			if err := ps.failure(); err != nil {
				return Key{}, &PeerError{p, err}
			}
			all = false
		}
		if all && len(q.items) == 0 {
			return Key{}, ErrAllDone
		}
		if err := in.wait(ctx, q); err != nil {
			return Key{}, err
		}
	}
}

// pending blocks until a message of one of the transfers vs is claimable,
// from any peer, and returns the first such transfer in the order of vs,
// leaving the message pending. It fails as recvAny does: ErrAllDone once
// every peer finished and none of vs has a message pending, a PeerError
// while a peer that has not finished is lost.
func (in *inbox) pending(ctx context.Context, vs []string) (string, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var arr [4]*varQueue
	qs := arr[:0]
	for _, v := range vs {
		q := in.vars[v]
		if q == nil {
			return "", fmt.Errorf("pending %s: %s does not accept a transfer named %q (not in the plan)", v, in.self, v)
		}
		qs = append(qs, q)
	}
	for {
		if in.closed {
			return "", ErrClosed
		}
		empty := true
		for i, q := range qs {
			for _, e := range q.items {
				if claimable(e) {
					return vs[i], nil
				}
			}
			empty = empty && len(q.items) == 0
		}
		all := true
		for _, p := range in.peers {
			ps := in.peer[p]
			if in.finished(ps) {
				continue
			}
			if err := ps.failure(); err != nil {
				return "", &PeerError{p, err}
			}
			all = false
		}
		if all && empty {
			return "", ErrAllDone
		}
		if err := in.wait(ctx, qs...); err != nil {
			return "", err
		}
	}
}

func (in *inbox) dropBefore(step int64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if step > in.floor {
		in.floor = step
	}
	for _, q := range in.vars {
		for i := 0; i < len(q.items); i++ {
			if q.items[i].step < step {
				in.dropEntry(q, i)
				i--
			}
		}
	}
}

// peek blocks until a message of v from src is pending and returns the
// oldest one's step.
func (in *inbox) peek(ctx context.Context, src NodeID, v string) (int64, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	q := in.vars[v]
	ps := in.peer[src]
	switch {
	case ps == nil:
		return 0, &PeerError{src, ErrUnknownPeer}
	case q == nil:
		return 0, fmt.Errorf("peek %s: %s does not accept a transfer named %q", src, in.self, v)
	}
	for {
		if in.closed {
			return 0, ErrClosed
		}
		found, min := false, int64(0)
		for _, e := range q.items {
			if e.src == src && (!found || e.step < min) {
				found, min = true, e.step
			}
		}
		if found {
			return min, nil
		}
		if in.finished(ps) {
			return 0, &PeerError{src, ErrPeerDone}
		}
		if err := ps.failure(); err != nil {
			return 0, &PeerError{src, err}
		}
		if err := in.wait(ctx, q); err != nil {
			return 0, err
		}
	}
}
