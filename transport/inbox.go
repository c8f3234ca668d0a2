package transport

import (
	"context"
	"fmt"
	"sync"
)

// inbox holds the messages delivered to one node until its recvs take them.
// Both transports deliver into it, so Recv/RecvAny/Done/stale semantics are
// written once. Buffers are recycled per size: in steady state a message
// costs no allocation.
type inbox struct {
	self    NodeID
	peers   []NodeID // the nodes RecvAny waits on
	onError func(error)

	mu      sync.Mutex
	specs   map[string]Spec
	vars    map[string]*varQueue
	free    map[int][][]byte
	peer    map[NodeID]*peerState
	floor   int64 // messages for steps below are stale
	closed  bool
	closing chan struct{}   // closed by close
	waiters []chan struct{} // free list
}

type peerState struct {
	delivered int64         // data messages delivered from this peer
	doneAt    int64         // message count announced by Done; -1 while not done
	err       error         // the peer's connection failed
	inc       uint64        // the peer's incarnation (0: never connected)
	restarts  int64         // times the peer came back as a new incarnation
	restarted chan struct{} // closed at the next restart
	live      chan struct{} // closed while the peer is connected (replaced on loss)
}

type entry struct {
	step int64
	src  NodeID
	buf  []byte
}

type varQueue struct {
	items   []entry
	waiting []chan struct{}
}

func newInbox(self NodeID, peers []NodeID, onError func(error)) *inbox {
	in := &inbox{
		self: self, peers: peers, onError: onError,
		specs: map[string]Spec{}, vars: map[string]*varQueue{},
		free: map[int][][]byte{}, peer: map[NodeID]*peerState{},
		floor: -1 << 62, closing: make(chan struct{}),
	}
	for _, p := range peers {
		in.peer[p] = &peerState{doneAt: -1, restarted: make(chan struct{}), live: make(chan struct{})}
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
// frame costs no allocation. It returns the spec's size.
func (in *inbox) check(src NodeID, inc uint64, step int64, v string, dt DType, n int) error {
	in.mu.Lock()
	defer in.mu.Unlock()
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
	case s.Bytes != n:
		return fmt.Errorf("message %s@%d from %s: %d bytes, %s expects %d", v, step, src, n, in.self, s.Bytes)
	case step < in.floor:
		return fmt.Errorf("message %s@%d from %s: stale, %s is at step %d", v, step, src, in.self, in.floor)
	}
	return nil
}

// buffer returns a recycled buffer of n bytes.
func (in *inbox) buffer(n int) []byte {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.bufferLocked(n)
}

func (in *inbox) bufferLocked(n int) []byte {
	if l := in.free[n]; len(l) > 0 {
		b := l[len(l)-1]
		in.free[n] = l[:len(l)-1]
		return b
	}
	return make([]byte, n)
}

func (in *inbox) recycle(b []byte) { in.free[len(b)] = append(in.free[len(b)], b) }

// recycleBuf returns a buffer taken by buffer but never delivered.
func (in *inbox) recycleBuf(b []byte) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.recycle(b)
}

// rejected counts a message from src that failed check as received, so the
// count announced by Done still adds up.
func (in *inbox) rejected(src NodeID, inc uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if ps := in.peer[src]; ps != nil && ps.inc == inc {
		ps.delivered++
		if ps.doneAt >= 0 {
			in.wakeAll()
		}
	}
}

// deliver hands a checked message to the inbox; buf is owned by it after.
func (in *inbox) deliver(src NodeID, inc uint64, step int64, v string, buf []byte) {
	in.mu.Lock()
	defer in.mu.Unlock()
	q := in.vars[v]
	ps := in.peer[src]
	if in.closed || q == nil || ps == nil || ps.inc != inc { // an older incarnation's message is never delivered
		in.recycle(buf)
		return
	}
	ps.delivered++
	if step < in.floor {
		in.recycle(buf)
		in.onError(fmt.Errorf("message %s@%d from %s: stale, dropped", v, step, src))
		in.wakeAll()
		return
	}
	q.items = append(q.items, entry{step: step, src: src, buf: buf})
	wake(q)
	if ps.doneAt >= 0 {
		in.wakeAll() // the peer may now count as finished
	}
}

// done records that src announced its end after count data messages.
func (in *inbox) done(src NodeID, inc uint64, count int64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if ps := in.peer[src]; ps != nil && ps.inc == inc {
		ps.doneAt = count
		in.wakeAll()
	}
}

// fail records that the connection to src failed.
func (in *inbox) fail(src NodeID, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if ps := in.peer[src]; ps != nil && ps.err == nil {
		ps.err = err
		select {
		case <-ps.live:
			ps.live = make(chan struct{})
		default:
		}
		in.wakeAll()
	}
}

// errStale marks a message of an older incarnation of its sender.
var errStale = fmt.Errorf("transport: message of an older incarnation of its sender, dropped")

// connected records that src is connected (again) as incarnation inc. The
// same incarnation after a loss is a network blip: its state is kept and
// its error cleared. A new incarnation is a restarted process: everything
// still pending from the old one is dropped and its counters start over.
// It reports whether src restarted.
func (in *inbox) connected(src NodeID, inc uint64) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	ps := in.peer[src]
	if ps == nil {
		return false
	}
	restarted := ps.inc != 0 && ps.inc != inc
	if restarted {
		for _, q := range in.vars {
			kept := q.items[:0]
			for _, e := range q.items {
				if e.src == src {
					in.recycle(e.buf)
				} else {
					kept = append(kept, e)
				}
			}
			clear(q.items[len(kept):])
			q.items = kept
		}
		ps.delivered, ps.doneAt = 0, -1
		ps.restarts++
		close(ps.restarted)
		ps.restarted = make(chan struct{})
	}
	ps.inc, ps.err = inc, nil
	select {
	case <-ps.live:
	default:
		close(ps.live)
	}
	in.wakeAll()
	return restarted
}

// restarts returns how often src restarted and a channel closed at its
// next restart.
func (in *inbox) restarts(src NodeID) (int64, <-chan struct{}) {
	in.mu.Lock()
	defer in.mu.Unlock()
	ps := in.peer[src]
	if ps == nil {
		return 0, nil
	}
	return ps.restarts, ps.restarted
}

// waitPeer blocks until src is connected; it returns at once with an
// error if this endpoint closed.
func (in *inbox) waitPeer(ctx context.Context, src NodeID) error {
	for {
		in.mu.Lock()
		ps := in.peer[src]
		if ps == nil {
			in.mu.Unlock()
			return &PeerError{src, ErrUnknownPeer}
		}
		if in.closed {
			in.mu.Unlock()
			return ErrClosed
		}
		live, err := ps.live, ps.err
		in.mu.Unlock()
		select {
		case <-live:
			return nil
		default:
		}
		select {
		case <-live:
			return nil
		case <-in.closing:
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("%w (%s: %v)", ctx.Err(), src, err)
			}
			return ctx.Err()
		}
	}
}

func (in *inbox) finished(ps *peerState) bool {
	return ps.doneAt >= 0 && ps.delivered >= ps.doneAt
}

func (in *inbox) close() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.closed {
		close(in.closing)
	}
	in.closed = true
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

// wait parks the caller until something changes for q or ctx ends. It is
// called with in.mu held and returns with it held.
func (in *inbox) wait(ctx context.Context, q *varQueue) error {
	var c chan struct{}
	if n := len(in.waiters); n > 0 {
		c, in.waiters = in.waiters[n-1], in.waiters[:n-1]
	} else {
		c = make(chan struct{}, 1)
	}
	q.waiting = append(q.waiting, c)
	in.mu.Unlock()
	var err error
	select {
	case <-c:
	case <-ctx.Done():
		err = ctx.Err()
	}
	in.mu.Lock()
	for i, w := range q.waiting {
		if w == c {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			break
		}
	}
	select { // drain a wake-up that raced with ctx
	case <-c:
	default:
	}
	in.waiters = append(in.waiters, c)
	return err
}

func (in *inbox) recv(ctx context.Context, src NodeID, step int64, v string, dst []byte) error {
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
				in.onError(fmt.Errorf("message %s@%d from %s: stale (wanted step %d), dropped", v, e.step, src, step))
				in.recycle(e.buf)
				q.items = append(q.items[:i], q.items[i+1:]...)
				i--
				continue
			}
			if e.step == step {
				if len(dst) != len(e.buf) {
					return fmt.Errorf("recv %s@%d from %s: %d bytes into a %d-byte tensor", v, step, src, len(e.buf), len(dst))
				}
				copy(dst, e.buf)
				in.recycle(e.buf)
				q.items = append(q.items[:i], q.items[i+1:]...)
				return nil
			}
		}
		if in.finished(ps) {
			return &PeerError{src, ErrPeerDone}
		}
		if ps.err != nil {
			return &PeerError{src, ps.err}
		}
		if err := in.wait(ctx, q); err != nil {
			return err
		}
	}
}

func (in *inbox) recvAny(ctx context.Context, v string, dst []byte) (Key, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	q := in.vars[v]
	if q == nil {
		return Key{}, fmt.Errorf("recv %s: %s does not accept a transfer named %q (not in the plan)", v, in.self, v)
	}
	for {
		if in.closed {
			return Key{}, ErrClosed
		}
		if len(q.items) > 0 {
			e := q.items[0]
			q.items = append(q.items[:0], q.items[1:]...)
			if len(dst) != len(e.buf) {
				in.recycle(e.buf)
				return Key{}, fmt.Errorf("recv %s@%d from %s: %d bytes into a %d-byte tensor", v, e.step, e.src, len(e.buf), len(dst))
			}
			copy(dst, e.buf)
			in.recycle(e.buf)
			return Key{Step: e.step, Var: v, Src: e.src}, nil
		}
		all := true
		for _, p := range in.peers {
			ps := in.peer[p]
			if in.finished(ps) {
				continue
			}
			if ps.err != nil {
				return Key{}, &PeerError{p, ps.err}
			}
			all = false
		}
		if all {
			return Key{}, ErrAllDone
		}
		if err := in.wait(ctx, q); err != nil {
			return Key{}, err
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
		kept := q.items[:0]
		for _, e := range q.items {
			if e.step < step {
				in.recycle(e.buf)
			} else {
				kept = append(kept, e)
			}
		}
		clear(q.items[len(kept):])
		q.items = kept
	}
}

// waitDone blocks until src finished (nil) or was lost (its error).
func (in *inbox) waitDone(ctx context.Context, src NodeID) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	ps := in.peer[src]
	if ps == nil {
		return &PeerError{src, ErrUnknownPeer}
	}
	q := &varQueue{} // a private wait queue: woken by wakeAll
	in.vars["\x00done:"+string(src)] = q
	defer delete(in.vars, "\x00done:"+string(src))
	for {
		switch {
		case in.finished(ps):
			return nil
		case ps.err != nil:
			return &PeerError{src, ps.err}
		case in.closed:
			return ErrClosed
		}
		if err := in.wait(ctx, q); err != nil {
			return err
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
		if ps.err != nil {
			return 0, &PeerError{src, ps.err}
		}
		if err := in.wait(ctx, q); err != nil {
			return 0, err
		}
	}
}
