package transport

// The recv side of the inbox: recv, recvAny, pending and peek wait until
// a message of their transfer is there (wait, parkWait), and take hands it
// over: a read-ahead payload copied out, a held one read by its decoder
// straight into the receiver; dropBefore drops stale steps.

import (
	"context"
	"errors"
	"fmt"
)

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
	in.parks.Add(1)
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
		all, err := in.allFinished()
		if err != nil {
			return Key{}, err
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
		all, err := in.allFinished()
		if err != nil {
			return "", err
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

// allFinished reports whether every peer has finished; a PeerError for
// the first peer that has not finished and whose connection is lost.
// in.mu is held.
func (in *inbox) allFinished() (bool, error) {
	all := true
	for _, p := range in.peers {
		ps := in.peer[p]
		if in.finished(ps) {
			continue
		}
		if err := ps.failure(); err != nil {
			return false, &PeerError{p, err}
		}
		all = false
	}
	return all, nil
}
