package rejoin

import (
	"fmt"
	"strings"
)

// Gather is a pserver incarnation before its first step: it hears every
// trainer's position (Heard), refuses at once a trainer whose run differs
// from the first one's (CheckRun), and once it heard them all decides
// where it starts (PlanStart). A fresh job waits for its trainers as long
// as they take to start; once a trainer shows that this pserver restarted
// into a running job (it rejoins, or it is past the restored step), the
// others get the trainer timeout to report (StartTimer, then TimedOut).
//
// Gather is a state machine: Step takes an event and returns what to do.
// It does no I/O; the pserver's communication receives the positions,
// runs the timer and sends what the plan says (package comm).
type Gather struct {
	trainers int
	first    int64 // the step the pserver restored, 0 for none
	async    bool
	waits    bool // the pserver waits for lost trainers (a trainer timeout)
	restored bool // it restored a checkpoint

	pos    []Position
	heard  []bool
	left   int
	leader int // the trainer heard first: the others' runs must equal its run
	timer  bool
	ahead  string
	done   bool
}

// NewGather returns the gathering of a pserver that restored the state of
// step restored (-1: none) in a job of trainers trainers; waits: it gives
// lost trainers time to come back (a trainer timeout above 0).
func NewGather(trainers int, restored int64, async, waits bool) *Gather {
	return &Gather{trainers: trainers, first: max(restored, 0), async: async, waits: waits, restored: restored >= 0,
		pos: make([]Position, trainers), heard: make([]bool, trainers), left: trainers, leader: -1}
}

// GatherEvent is an input of Gather.Step: Heard or TimedOut.
type GatherEvent interface{ gatherEvent() }

// Heard is trainer Trainer's position.
type Heard struct {
	Trainer int
	Pos     Position
}

// TimedOut is the end of the timer StartTimer started.
type TimedOut struct{}

func (Heard) gatherEvent()    {}
func (TimedOut) gatherEvent() {}

// GatherAction is an output of Gather.Step: Wait, StartTimer, Start or Stop.
type GatherAction interface{ gatherAction() }

// Wait: keep receiving positions.
type Wait struct{}

// StartTimer: a restart into a running job; give the trainers not heard
// yet the trainer timeout to report (then step TimedOut). Keep receiving.
type StartTimer struct{ Reason string }

// Start: every trainer was heard; send each what Plan says and start at
// Plan.Start (Plan.Err == nil), or send the resume steps and stop the job
// with Plan.Err. Note is what to tell the operator (Warn: as a warning).
type Start struct {
	Plan StartPlan
	Note string
	Warn bool
}

// Stop: the job cannot go on; stop it with Err.
type Stop struct{ Err error }

func (Wait) gatherAction()       {}
func (StartTimer) gatherAction() {}
func (Start) gatherAction()      {}
func (Stop) gatherAction()       {}

// Step advances the gathering by one event.
func (g *Gather) Step(ev GatherEvent) GatherAction {
	if g.done {
		return Stop{Err: fmt.Errorf("rejoin: the pserver already started")}
	}
	switch e := ev.(type) {
	case Heard:
		if e.Trainer < 0 || e.Trainer >= g.trainers || g.heard[e.Trainer] {
			return Wait{} // the transport accepts one position per trainer incarnation
		}
		g.pos[e.Trainer], g.heard[e.Trainer] = e.Pos, true
		g.left--
		if g.leader < 0 {
			g.leader = e.Trainer
		} else if err := CheckRun(e.Trainer, e.Pos, g.leader, g.pos[g.leader], g.async); err != nil {
			g.done = true
			return Stop{Err: err}
		}
		if g.left == 0 {
			g.done = true
			plan := PlanStart(g.pos, g.first, g.async)
			note, warn := g.note(plan)
			return Start{Plan: plan, Note: note, Warn: warn}
		}
		if (e.Pos.Rejoin || e.Pos.Known() && e.Pos.Sent >= g.first) && !g.timer && g.waits {
			g.timer = true
			g.ahead = fmt.Sprintf("trainer-%d rejoins, having sent gradients of step %d", e.Trainer, e.Pos.Sent)
			return StartTimer{Reason: fmt.Sprintf("a restart into a running job (trainer-%d sent gradients of step %d, the restored step is %d); waiting for every trainer's position", e.Trainer, e.Pos.Sent, g.first)}
		}
		return Wait{}
	case TimedOut:
		g.done = true
		var missing []string
		for i, h := range g.heard {
			if !h {
				missing = append(missing, fmt.Sprintf("trainer-%d", i))
			}
		}
		return Stop{Err: fmt.Errorf("restarted into a running job (%s) but [%s] sent no position within the trainer timeout; the job stops", g.ahead, strings.Join(missing, " "))}
	}
	return Wait{}
}

// note says what a start means for the job: resuming, restarting into a
// running job with or without losing updates, or losing everything.
func (g *Gather) note(plan StartPlan) (string, bool) {
	restored, hasCheckpoint := g.first, g.restored
	running := plan.Behind
	for _, p := range g.pos {
		running = running || p.Rejoin
	}
	switch {
	case plan.Err != nil:
		return "", false
	case running && !hasCheckpoint:
		return fmt.Sprintf("RESTARTED INTO A RUNNING JOB WITHOUT A CHECKPOINT at step %d: this pserver's blocks start again from their initializers; the job carries on, but everything they had learned is lost (give pservers --checkpoint-dir and --checkpoint-every)", plan.Start), true
	case running && g.async:
		return fmt.Sprintf("restarted into a running job from checkpoint %d (the updates to this pserver's blocks since it are lost; async: each trainer carries on at its own step)", restored), true
	case plan.Behind:
		return fmt.Sprintf("restarted into a running job at step %d from checkpoint %d (updates of steps %d..%d to this pserver's blocks are lost)", plan.Start, restored, restored, plan.Start-1), true
	case running:
		return fmt.Sprintf("restarted into a running job at step %d, the step of its checkpoint: no update lost", plan.Start), true
	case hasCheckpoint:
		return fmt.Sprintf("the trainers join at the restored step %d", plan.Start), false
	}
	return "", false
}
