package comm

import (
	"context"
	"errors"
	"sync"
)

// quiet tracks whether an async table part's loop waits with nothing
// pending (in Pending, between updates), and the last step of a row
// gradient it received from each trainer: a pull at the job's end
// (Pull.Final) reads an async shard only then, so it sees every update
// the trainers sent (TrackQuiet, Quiet).
type quiet struct {
	mu    sync.Mutex
	grad  string // the row-gradient transfer
	idle  bool
	vs    []string // what the loop waits for while idle
	grads []int64  // per trainer: the last step received, -1 before any
	wake  []chan struct{}
	// now is a context already cancelled: Pending with it only looks
	// (made once, so that a step allocates nothing).
	now context.Context
}

// TrackQuiet makes the part track when its loop is quiet (an async
// part reading the row gradient grad; see Quiet).
func (p *Part) TrackQuiet(grad string) {
	now, cancel := context.WithCancel(context.Background())
	cancel()
	q := &quiet{grad: grad, grads: make([]int64, p.c.trainers), now: now}
	for i := range q.grads {
		q.grads[i] = -1
	}
	p.q = q
}

// set marks the loop idle or busy and wakes the waiters. Busy waits for
// a reader holding the part (Quiet's read) to finish.
func (q *quiet) set(idle bool, vs []string) {
	q.mu.Lock()
	q.idle, q.vs = idle, vs
	for _, c := range q.wake {
		close(c)
	}
	q.wake = nil
	q.mu.Unlock()
}

func (q *quiet) received(v string, who int, step int64) {
	if v != q.grad || who < 0 || who >= len(q.grads) {
		return
	}
	q.mu.Lock()
	q.grads[who] = max(q.grads[who], step)
	q.mu.Unlock()
}

// Quiet runs read once the part's loop waits with nothing pending and it
// received trainer who's row gradient of step (or a later one); the loop
// does not go on until read returned. Call it once every other trainer is
// done (WaitDone), so nothing more arrives but from who.
func (p *Part) Quiet(ctx context.Context, who int, step int64, read func()) error {
	q := p.q
	for {
		q.mu.Lock()
		// Idle, and still nothing pending: a message that arrived since the
		// loop found none is pending until the loop takes it, which it
		// cannot before this returns.
		if q.idle && (who < 0 || who >= len(q.grads) || q.grads[who] >= step) && !p.anyPending(q.vs) {
			read()
			q.mu.Unlock()
			return nil
		}
		c := make(chan struct{})
		q.wake = append(q.wake, c)
		q.mu.Unlock()
		select {
		case <-c:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pendingQuiet is Pending for a tracked part: when nothing is pending
// the loop is marked idle while it waits.
func (p *Part) pendingQuiet(ctx context.Context, vs []string) (string, error) {
	v, err := p.c.ep.Pending(p.q.now, vs)
	switch {
	case err == nil:
		return v, nil
	case !errors.Is(err, context.Canceled) || ctx.Err() != nil:
		return p.pendingWait(ctx, vs) // done, lost or stopped: as without tracking
	}
	p.q.set(true, vs)
	defer p.q.set(false, nil)
	return p.pendingWait(ctx, vs)
}

// anyPending reports whether a message of vs is pending now.
func (p *Part) anyPending(vs []string) bool {
	_, err := p.c.ep.Pending(p.q.now, vs)
	return err == nil
}
