package transport

// Peer lifecycle in the inbox: what it knows of each peer (peerState) and
// of each of its streams (the counts a resume frame reports); a peer's
// Done and Abort (the Aborted error), a lost connection (fail), a
// reconnect or a restart (connected), and the waits on a peer (waitPeer,
// waitDone, finished).

import (
	"context"
	"fmt"
)

type peerState struct {
	delivered int64         // data messages that arrived from this peer (for Done)
	doneAt    int64         // message count announced by Done; -1 while not done
	bye       bool          // a second Done came: the peer closes (Config.HangupWait)
	err       error         // the peer's connection failed
	aborted   error         // the peer stopped the job (an Aborted); permanent
	inc       uint64        // the peer's incarnation (0: never connected)
	restarts  int64         // times the peer came back as a new incarnation
	restarted chan struct{} // closed at the next restart
	live      chan struct{} // closed while the peer is connected (replaced on loss)
	streams   map[string]*streamState
}

// streamState is what arrived on one stream ("" the message stream, else
// a transfer's bulk stream) from a peer's current incarnation.
type streamState struct {
	count int64 // messages fully received (delivered, rejected or dropped)
	head  *held // a held message not yet fully received, or nil
}

// Aborted is the error a peer gave when it stopped the job (Endpoint.Abort).
type Aborted struct{ Reason string }

func (a *Aborted) Error() string { return "stopped the job: " + a.Reason }

func (ps *peerState) stream(v string) *streamState {
	s := ps.streams[v]
	if s == nil {
		s = &streamState{}
		ps.streams[v] = s
	}
	return s
}

// current returns the state of src if inc is its current incarnation.
func (in *inbox) current(src NodeID, inc uint64) *peerState {
	if ps := in.peer[src]; ps != nil && ps.inc == inc {
		return ps
	}
	return nil
}

// done records that src announced its end after count data messages.
func (in *inbox) done(src NodeID, inc uint64, count int64) {
	in.mu.Lock()
	bye := false
	if ps := in.current(src, inc); ps != nil {
		in.counted(ps, "", false)
		ps.bye = ps.doneAt >= 0 // Done again: the dialer's goodbye (TCP.sayBye)
		bye = ps.bye
		ps.doneAt = count
		in.wakeAll()
	}
	in.mu.Unlock()
	if bye && in.onBye != nil {
		in.onBye()
	}
}

// abort records that src stopped the job, and why.
func (in *inbox) abort(src NodeID, inc uint64, reason string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if ps := in.current(src, inc); ps != nil {
		in.counted(ps, "", false)
		if ps.aborted == nil {
			ps.aborted = &Aborted{Reason: reason}
			in.onError(&PeerError{src, ps.aborted})
		}
		in.wakeAll()
	}
}

// aborted reports whether src stopped the job.
func (in *inbox) aborted(src NodeID) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	ps := in.peer[src]
	return ps != nil && ps.aborted != nil
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

// failure is why recvs from ps fail now, or nil.
func (ps *peerState) failure() error {
	if ps.aborted != nil {
		return ps.aborted
	}
	return ps.err
}

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
			for i := 0; i < len(q.items); i++ {
				if q.items[i].src == src {
					in.dropEntry(q, i)
					i--
				}
			}
		}
		for _, st := range ps.streams {
			if st.head != nil {
				in.drop(st.head)
			}
		}
		ps.streams = map[string]*streamState{}
		ps.delivered, ps.doneAt, ps.aborted, ps.bye = 0, -1, nil, false
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

// resumePoint says how much of a transfer a receiver has: count messages,
// and off bytes of the next one.
type resumePoint struct {
	v     string
	count int64
	off   int64
}

// resumePoints lists what arrived from src's current incarnation, per
// stream (streams with nothing are left out).
func (in *inbox) resumePoints(src NodeID) []resumePoint {
	in.mu.Lock()
	defer in.mu.Unlock()
	ps := in.peer[src]
	if ps == nil {
		return nil
	}
	var rps []resumePoint
	for v, st := range ps.streams {
		rp := resumePoint{v: v, count: st.count}
		if st.head != nil {
			rp.off = int64(st.head.off)
		}
		if rp.count > 0 || rp.off > 0 {
			rps = append(rps, rp)
		}
	}
	return rps
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

// finishedPeer reports whether src said Done and everything it sent
// before arrived.
func (in *inbox) finishedPeer(src NodeID) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	ps := in.peer[src]
	return ps != nil && in.finished(ps)
}

// awaitsBye reports whether src finished but has not yet said Done
// again, its goodbye (TCP.sayBye).
func (in *inbox) awaitsBye(src NodeID) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	ps := in.peer[src]
	return ps != nil && in.finished(ps) && !ps.bye
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
		if ps.aborted != nil {
			in.mu.Unlock()
			return &PeerError{src, ps.aborted}
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
	if ps.doneAt < 0 || ps.delivered < ps.doneAt {
		return false
	}
	// A held message counts as delivered once its header arrived; the
	// peer is not finished while its payload is still to come.
	for _, st := range ps.streams {
		if st.head != nil && !st.head.discard {
			return false
		}
	}
	return true
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
	in.vars["\x00done:"+src.String()] = q
	defer delete(in.vars, "\x00done:"+src.String())
	for {
		switch {
		case in.finished(ps):
			return nil
		case ps.failure() != nil:
			return &PeerError{src, ps.failure()}
		case in.closed:
			return ErrClosed
		}
		if err := in.wait(ctx, q); err != nil {
			return err
		}
	}
}
