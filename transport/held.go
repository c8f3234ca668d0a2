package transport

// Held large messages: a payload above the inbox's eager size is
// registered by hold and waits in its stream until a recv claims it (take,
// in recv.go); its decoder then reads it straight into the receiver's
// memory (next, filled). One that blocks a later step of its stream is
// spilled into a buffer (spillBlockers); one cut off by a lost connection
// is parked until the sender writes the rest again (park).

import (
	"errors"
	"fmt"
)

// held is a large message whose payload its decoder reads only once a recv
// claimed it. It outlives a lost connection (parked, no reader) until the
// sender writes it again on the next one.
type held struct {
	src     NodeID
	v       string
	step    int64
	n       int
	off     int  // payload bytes consumed so far
	reader  bool // a decoder is attached to read the rest
	discard bool // stale: its decoder skips the rest
	queued  bool // in its var queue (claimable)
	wake    chan struct{}

	// the current claim
	claimed bool
	stop    bool // the claimer gives up: the decoder stops at the next chunk
	dst     []byte
	sink    Sink
	fin     chan error // the decoder's answer to a claim
	// what took the first bytes: a partly consumed message may only be
	// taken up again by the same receiver (bytes before off went there)
	firstDst  *byte
	firstSink Sink

	// spilling: a recv on the same stream waits for another step behind
	// this one, so the decoder reads it into a buffer after all and queues
	// it like a read-ahead message (spill is that buffer once begun)
	spillWant bool
	spill     []byte
}

// hold registers a large message whose header (at payload offset off, > 0
// when the sender resumes it) was read by a decoder of incarnation inc,
// and returns it for the decoder to feed (or skip, when it is stale). An
// error is a protocol violation, or the endpoint closed.
func (in *inbox) hold(src NodeID, inc uint64, step int64, v string, n, off int) (*held, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	ps := in.current(src, inc)
	q := in.vars[v]
	if in.closed || ps == nil || q == nil {
		return nil, ErrClosed
	}
	st := ps.stream(v)
	if h := st.head; h != nil { // the sender writes a parked message again
		if h.reader || h.step != step || h.off != off {
			return nil, fmt.Errorf("%w: %s@%d from %s resumed at byte %d, expected %s@%d at byte %d", errProtocol, v, step, src, off, v, h.step, h.off)
		}
		h.reader = true // a dropped h is skipped by its decoder (next)
		wake(q)
		return h, nil
	}
	if off != 0 {
		return nil, fmt.Errorf("%w: %s@%d from %s resumed at byte %d, but no message of it is pending", errProtocol, v, step, src, off)
	}
	ps.delivered++
	if ps.doneAt >= 0 {
		in.wakeAll()
	}
	h := &held{src: src, v: v, step: step, n: n, reader: true, wake: make(chan struct{}, 1), fin: make(chan error, 1)}
	st.head = h
	if step < in.floor {
		in.onError(fmt.Errorf("message %s@%d from %s: stale, dropped", v, step, src))
		h.discard = true
		return h, nil
	}
	h.queued = true
	q.items = append(q.items, entry{step: step, src: src, h: h})
	wake(q)
	return h, nil
}

// target is what a decoder reads the next bytes of a held message into.
type target struct {
	dst  []byte
	sink Sink
	off  int
}

// next blocks until h is claimed (the target of its next bytes) or
// discarded (ok false: skip the rest). dead is the decoder's connection's
// end: then h is parked and the error returned.
func (in *inbox) next(h *held, dead <-chan struct{}) (t target, ok bool, err error) {
	in.mu.Lock()
	for {
		switch {
		case h.discard || in.closed:
			if h.claimed { // the claimer waits: it may use its memory again
				h.claimed, h.stop, h.dst, h.sink = false, false, nil, nil
				if in.closed {
					h.fin <- ErrClosed
				} else {
					h.fin <- errDropped
				}
			}
			in.mu.Unlock()
			return target{}, false, nil
		case h.claimed && h.stop:
			h.claimed, h.stop, h.dst, h.sink = false, false, nil, nil
			h.fin <- errStopped
		case h.claimed:
			t = target{dst: h.dst, sink: h.sink, off: h.off}
			in.mu.Unlock()
			return t, true, nil
		case h.spill != nil || (h.spillWant && h.off == 0):
			if h.spill == nil {
				h.spill = in.bufferLocked(h.n)
				h.firstDst = &h.spill[0]
			}
			t = target{dst: h.spill, off: h.off}
			in.mu.Unlock()
			return t, true, nil
		}
		in.mu.Unlock()
		select {
		case <-h.wake:
		case <-dead:
			in.park(h, errors.New("connection lost"))
			return target{}, false, errors.New("connection lost")
		case <-in.closing:
		}
		in.mu.Lock()
	}
}

// filled records that k more payload bytes of h were consumed; it reports
// whether h is complete.
func (in *inbox) filled(h *held, k int) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	h.off += k
	if h.off < h.n {
		return false
	}
	if h.spill != nil { // queued from now on like a read-ahead message
		q := in.vars[h.v]
		for i, e := range q.items {
			if e.h == h {
				q.items[i] = entry{step: h.step, src: h.src, buf: h.spill}
				h.queued = false
				wake(q)
				break
			}
		}
		if h.queued || h.discard { // dropped meanwhile
			in.unqueue(h)
			in.recycle(h.spill)
		}
		h.spill = nil
	}
	in.finish(h)
	if h.claimed {
		h.claimed = false
		h.fin <- nil
	}
	return true
}

// skipped records that the rest of a discarded h was skipped.
func (in *inbox) skipped(h *held) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if h.spill != nil {
		in.recycle(h.spill)
		h.spill = nil
	}
	in.finish(h)
}

// finish ends h on its stream: counted as received, unqueued.
func (in *inbox) finish(h *held) {
	ps := in.peer[h.src]
	if st := ps.streams[h.v]; st != nil && st.head == h {
		st.head = nil
		in.counted(ps, h.v, false)
	}
	in.unqueue(h)
	h.reader = false
}

func (in *inbox) unqueue(h *held) {
	if !h.queued {
		return
	}
	h.queued = false
	q := in.vars[h.v]
	for i, e := range q.items {
		if e.h == h {
			q.items = append(q.items[:i], q.items[i+1:]...)
			break
		}
	}
}

// park detaches h from its dead decoder: it stays pending (bytes before
// h.off consumed) until the sender writes the rest on a new connection.
// A claim waiting on it fails with the loss.
func (in *inbox) park(h *held, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	h.reader = false
	if h.claimed {
		h.claimed, h.stop, h.dst, h.sink = false, false, nil, nil
		h.fin <- &PeerError{h.src, err}
	}
}

// drop discards h (stale): its decoder skips the rest; a parked h is
// skipped when the sender writes it again.
func (in *inbox) drop(h *held) {
	h.discard = true
	in.unqueue(h)
	if h.claimed && !h.reader { // a reading decoder answers at its next chunk (next)
		h.claimed, h.stop, h.dst, h.sink = false, false, nil, nil
		h.fin <- errDropped
	}
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// claimable reports whether entry e can be taken now (a held message needs
// its decoder attached and no other claim).
func claimable(e entry) bool {
	return e.h == nil || (e.h.reader && !e.h.claimed && e.h.spill == nil)
}

// spillBlockers asks the decoders of held messages from src on q that are
// not for step to read them into buffers: each heads its stream, so the
// wanted step, sent after it, cannot arrive until it is consumed.
func (in *inbox) spillBlockers(q *varQueue, src NodeID, step int64) {
	for _, e := range q.items {
		if h := e.h; h != nil && e.src == src && e.step != step && !h.spillWant && !h.claimed && h.off == 0 {
			h.spillWant = true
			select {
			case h.wake <- struct{}{}:
			default:
			}
		}
	}
}
