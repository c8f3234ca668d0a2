package rejoin

import "fmt"

// An incarnation is one process of a node, as a peer's transport counts
// them: 0 for the process it first met, one more for each new process that
// took the node's place. It is the protocol's one notion of "which
// process": a trainer's Link records the incarnation of its pserver that
// holds its position, a pserver's Part the incarnation of each trainer
// that has its parameters, and a node is up to date with its peers when
// the incarnations it recorded equal theirs.

// Link is a trainer's protocol state for one pserver: the incarnation it
// told its position to and brought up to date, and whether it is waiting
// for the pserver (lost) or for a new incarnation's resume step. Step is a
// pure function of the state and an event; the trainer's communication
// does what the action says and reports the outcome as the next event
// (package comm, recvFromPServer).
//
//	Up ──Lost──► Down ──Back(same)──► Up                (a blip)
//	Up ──Checked(new)──┐
//	Down ──Back(new)───┴─► Telling ──Resumed──► Up      (resend, then go on)
//	                       Telling ──Interrupted──► Down (tell the next one)
type Link struct {
	Peer  string // the pserver, for messages: "pserver-1"
	Async bool
	// Told is the incarnation that holds this trainer's position and all
	// it sent (Up), or the last one that did (Down, Telling).
	Told  int64
	Phase Phase
	// Target is the incarnation being told (Telling).
	Target int64
	// Pos is the position told to Target.
	Pos Position
}

// Phase is a Link's state.
type Phase uint8

const (
	Up      Phase = iota // messages flow
	Down                 // the connection is lost: waiting for the pserver
	Telling              // a new incarnation: waiting for its resume step
)

func (p Phase) String() string { return [...]string{"up", "down", "telling"}[p] }

// LinkEvent is an input of Link.Step.
type LinkEvent interface{ linkEvent() }

// Checked: before a receive from the pserver (and after one was woken by
// a restart), the pserver's incarnation now and this trainer's position.
type Checked struct {
	Now int64
	Pos Position
}

// Lost: a receive or flush failed because the pserver's connection is
// lost (the transport saw no connection when asked).
type Lost struct{}

// Back: the pserver is connected again, at incarnation Now; Pos is this
// trainer's position.
type Back struct {
	Now int64
	Pos Position
}

// GaveUp: the pserver did not come back within the trainer's timeout.
type GaveUp struct{ Err error }

// Resumed: incarnation Inc said it resumes at step Step.
type Resumed struct{ Inc, Step int64 }

// Interrupted: the wait for the resume step ended because the pserver
// was lost, or restarted once more.
type Interrupted struct{}

func (Checked) linkEvent()     {}
func (Lost) linkEvent()        {}
func (Back) linkEvent()        {}
func (GaveUp) linkEvent()      {}
func (Resumed) linkEvent()     {}
func (Interrupted) linkEvent() {}

// LinkAction is an output of Link.Step.
type LinkAction interface{ linkAction() }

// Proceed: receive (again). Blip: the same process came back after a
// lost connection (the transport sends again what the loss cut off, so a
// partial receive goes on where it stopped).
type Proceed struct{ Blip bool }

// WaitBack: wait, up to the trainer's timeout, for the pserver to be
// connected (then Back or GaveUp). First: the loss is new (say so once).
type WaitBack struct{ First bool }

// Tell: what arrived from the old process is gone (a partial receive
// starts over); send Pos, with Rejoin, to incarnation Inc and wait for its
// resume step (then Resumed or Interrupted).
type Tell struct {
	Inc int64
	Pos Position
}

// Resend: incarnation Inc resumes at Step; send it again what it lacks of
// each transfer (PlanResend), then receive again.
type Resend struct{ Inc, Step int64 }

// Fail: the trainer cannot go on with this pserver.
type Fail struct{ Err error }

func (Proceed) linkAction()  {}
func (WaitBack) linkAction() {}
func (Tell) linkAction()     {}
func (Resend) linkAction()   {}
func (Fail) linkAction()     {}

// Step advances the link by one event.
func (l *Link) Step(ev LinkEvent) LinkAction {
	switch e := ev.(type) {
	case Checked:
		if l.Phase == Up && e.Now == l.Told {
			return Proceed{}
		}
		if l.Phase == Down {
			return WaitBack{}
		}
		return l.tell(e.Now, e.Pos)
	case Lost:
		first := l.Phase == Up
		l.Phase = Down
		return WaitBack{First: first}
	case Back:
		if e.Now == l.Told {
			l.Phase = Up
			return Proceed{Blip: true}
		}
		return l.tell(e.Now, e.Pos)
	case GaveUp:
		return Fail{Err: e.Err}
	case Resumed:
		if l.Phase != Telling || e.Inc != l.Target {
			return Fail{Err: fmt.Errorf("rejoin: %s: a resume step from incarnation %d while telling %d (%s)", l.Peer, e.Inc, l.Target, l.Phase)}
		}
		if err := ResumeConflict(l.Peer, l.Pos, e.Step, l.Async); err != nil {
			return Fail{Err: err}
		}
		l.Phase, l.Told = Up, e.Inc
		return Resend{Inc: e.Inc, Step: e.Step}
	case Interrupted:
		l.Phase = Down
		return WaitBack{}
	}
	return Fail{Err: fmt.Errorf("rejoin: unknown event %T", ev)}
}

func (l *Link) tell(now int64, pos Position) LinkAction {
	pos.Rejoin = true
	l.Phase, l.Target, l.Pos = Telling, now, pos
	return Tell{Inc: now, Pos: pos}
}
