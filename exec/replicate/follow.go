package replicate

import "fmt"

// Follow is a replica's view of the pservers it follows: for each, the
// incarnation it is subscribed to, whether its full state arrived, the
// newest step it announced when the subscription began and the newest
// step applied. The replica's loop feeds it what it reads and does what
// it answers; the model it serves is at Version, and it is Ready once
// every pserver's full state arrived and it applied what each had when
// the subscription began.
type Follow struct {
	ps []pserverView
}

type pserverView struct {
	inc       uint64 // incarnation subscribed to (0: none)
	full      bool   // its full state arrived
	announced int64  // its step when the subscription began
	applied   int64  // newest step applied
}

// NewFollow follows n pservers.
func NewFollow(n int) *Follow { return &Follow{ps: make([]pserverView, n)} }

// Action is what the replica's loop does after an event.
type Action uint8

const (
	// Apply: apply the delta (its values are the pserver's newest).
	Apply Action = iota
	// Resubscribe: the pserver restarted or the delta does not follow
	// what the replica holds; drop the connection and subscribe again (a
	// full state follows).
	Resubscribe
)

// Subscribed records a subscription to pserver p, incarnation inc, whose
// newest applied step was announced: a full state is owed (a new
// incarnation's, after a restart, replaces everything the old one sent).
func (f *Follow) Subscribed(p int, inc uint64, announced int64) {
	f.ps[p] = pserverView{inc: inc, announced: announced, applied: -1}
}

// Lost records that the subscription to p was lost: until it is
// subscribed again the replica is not Ready.
func (f *Follow) Lost(p int) { f.ps[p] = pserverView{} }

// Received decides what to do with a delta of pserver p, incarnation inc:
// apply it, or subscribe again when it cannot be applied (another
// incarnation than the one subscribed to, a partial delta before the full
// state, a step going back).
func (f *Follow) Received(p int, inc uint64, d Delta) (Action, error) {
	v := &f.ps[p]
	switch {
	case v.inc == 0 || inc != v.inc:
		return Resubscribe, fmt.Errorf("pserver %d: a delta of incarnation %d while subscribed to %d", p, inc, v.inc)
	case !v.full && !d.Full:
		return Resubscribe, fmt.Errorf("pserver %d: a partial delta (step %d) before its full state", p, d.Step)
	case d.Step < v.applied:
		return Resubscribe, fmt.Errorf("pserver %d: step %d after step %d", p, d.Step, v.applied)
	}
	v.full = v.full || d.Full
	v.applied = d.Step
	return Apply, nil
}

// Ready says whether the replica serves the job's current state: every
// pserver's full state arrived and it applied at least the step each
// announced when it subscribed.
func (f *Follow) Ready() bool {
	for _, v := range f.ps {
		if v.inc == 0 || !v.full || v.applied < v.announced {
			return false
		}
	}
	return len(f.ps) > 0
}

// Version is the training step the replica serves: the oldest of the
// steps applied from each pserver (in a sync job every pserver applies
// step k before any applies k+1, so the served model holds step Version
// of every block and newer values of some); -1 before every pserver's
// full state.
func (f *Follow) Version() int64 {
	v := int64(-1)
	for i, p := range f.ps {
		if !p.full {
			return -1
		}
		if i == 0 || p.applied < v {
			v = p.applied
		}
	}
	return v
}
