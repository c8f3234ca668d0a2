package halt

import "fmt"

// Trainer is a trainer's side of the stop protocol: whether it may start
// its next step, and what it tells the hub.
type Trainer struct {
	async bool
	// started: the trainer knows its first step (Started); entered is the
	// number of steps it started (step k entered: k+1).
	started bool
	entered int64
	asked   bool
	// proposed: it told the hub (this hub incarnation) its steps; final:
	// as the trainer's end.
	proposed, final bool
	ended           bool
	// last is the number of steps the job runs (-1: not decided).
	last int64
}

// NewTrainer is the protocol's state of a trainer of a sync or async job.
func NewTrainer(async bool) *Trainer { return &Trainer{async: async, last: -1} }

// TrainerEvent is an input of Trainer.Step.
type TrainerEvent interface{ trainerEvent() }

// Started: the trainer's first step is First (the steps before it are the
// job's before this process).
type Started struct{ First int64 }

// Asked: the job is asked to stop: a signal to this trainer, or a
// pserver's ask.
type Asked struct{}

// Decided: the hub decided that the job runs Steps steps in all.
type Decided struct{ Steps int64 }

// Ended: the trainer ran Steps steps and runs no more (its last step, or
// its source ended).
type Ended struct{ Steps int64 }

// HubRestarted: the hub came back as a new process, which knows nothing
// of what this trainer told the old one.
type HubRestarted struct{}

func (Started) trainerEvent()      {}
func (Asked) trainerEvent()        {}
func (Decided) trainerEvent()      {}
func (Ended) trainerEvent()        {}
func (HubRestarted) trainerEvent() {}

// TrainerAction is an output of Trainer.Step.
type TrainerAction interface{ trainerAction() }

// None: nothing to do.
type None struct{}

// Propose: send the hub the number of steps this trainer started (Final:
// it ended there and runs no more).
type Propose struct {
	Steps int64
	Final bool
}

// Run: start the step (Trainer.Enter).
type Run struct{}

// Wait: do not start the step before the job's decision; ask again then
// (Trainer.Enter).
type Wait struct{}

// Stop: the step is not to run: the trainer's steps are over.
type Stop struct{}

// Fail: the protocol cannot go on.
type Fail struct{ Err error }

func (None) trainerAction()    {}
func (Propose) trainerAction() {}
func (Run) trainerAction()     {}
func (Wait) trainerAction()    {}
func (Stop) trainerAction()    {}
func (Fail) trainerAction()    {}

// Step advances the trainer's state by one event.
func (t *Trainer) Step(ev TrainerEvent) TrainerAction {
	switch e := ev.(type) {
	case Started:
		if t.started {
			return None{}
		}
		t.started, t.entered = true, e.First
		return t.ask()
	case Asked:
		if t.asked {
			return None{}
		}
		t.asked = true
		return t.ask()
	case HubRestarted:
		if !t.proposed || t.last >= 0 && !t.final {
			return None{} // nothing told yet, or the job decided already
		}
		t.proposed = false // the new process heard nothing: tell it again
		if t.final {
			t.proposed = true
			return Propose{Steps: t.entered, Final: true}
		}
		return t.ask()
	case Decided:
		t.asked = true
		if e.Steps < t.entered {
			return Fail{Err: fmt.Errorf("the job agreed to stop after step %d, but this trainer started step %d already (a broken stop protocol)", e.Steps, t.entered)}
		}
		t.last = e.Steps
		return None{}
	case Ended:
		if t.ended {
			return None{}
		}
		t.ended, t.entered = true, e.Steps
		if t.proposed || t.async {
			return None{}
		}
		t.proposed, t.final = true, true
		return Propose{Steps: e.Steps, Final: true}
	}
	return None{}
}

// ask is what an asked trainer that knows its first step does: propose
// its steps (an async trainer's last step is then its own: the one it
// is in).
func (t *Trainer) ask() TrainerAction {
	if !t.asked || !t.started || t.proposed || t.ended {
		return None{}
	}
	t.proposed = true
	if t.async {
		t.last = t.entered
	}
	return Propose{Steps: t.entered}
}

// Enter is the trainer's decision when its loop wants to start step k:
// Run, Wait or Stop (a method, not a Step event: it runs before every
// step and allocates nothing).
func (t *Trainer) Enter(k int64) TrainerAction {
	switch {
	case t.ended:
		return Stop{}
	case t.last >= 0 && k >= t.last:
		return Stop{}
	case t.last >= 0:
	case t.asked && !t.started:
		// a trainer that knows its first step proposes before it enters
		return Wait{}
	case t.asked:
		return Wait{} // sync: until the hub decided
	}
	t.entered = max(t.entered, k+1)
	return Run{}
}

// Last is the number of steps the job runs, once decided (-1 before).
func (t *Trainer) Last() int64 { return t.last }

// Hub is a pserver's side of the stop protocol: pserver-0, the hub,
// gathers the trainers' proposals and decides; every pserver asks the
// trainers to stop when it is asked itself.
type Hub struct {
	trainers    int
	async, hub  bool
	asking      bool
	asked, told []bool // each trainer's current process was asked, told the decision
	steps       []int64
	final       []bool
	last        int64
}

// NewHub is the protocol's state of a pserver of a job of trainers
// trainers; hub: it is the one that decides (pserver-0).
func NewHub(trainers int, async, hub bool) *Hub {
	h := &Hub{trainers: trainers, async: async, hub: hub, asked: make([]bool, trainers), told: make([]bool, trainers),
		steps: make([]int64, trainers), final: make([]bool, trainers), last: -1}
	for i := range h.steps {
		h.steps[i] = -1
	}
	return h
}

// HubEvent is an input of Hub.Step.
type HubEvent interface{ hubEvent() }

// Signal: this pserver was asked to stop.
type Signal struct{}

// Proposed: trainer Trainer proposed Steps (Final: it ended there).
type Proposed struct {
	Trainer int
	Steps   int64
	Final   bool
}

// Restarted: trainer Trainer came back as a new process, which knows
// nothing of the stop.
type Restarted struct{ Trainer int }

func (Signal) hubEvent()    {}
func (Proposed) hubEvent()  {}
func (Restarted) hubEvent() {}

// Sends is what a pserver sends after an event: an ask to each trainer
// of Ask, the decision (Steps) to each trainer of Decide.
type Sends struct {
	Ask    []int
	Decide []int
	Steps  int64
}

// Step advances the pserver's state by one event.
func (h *Hub) Step(ev HubEvent) Sends {
	var out Sends
	switch e := ev.(type) {
	case Signal:
		h.asking = true
	case Proposed:
		if !h.hub || e.Trainer < 0 || e.Trainer >= h.trainers {
			return out
		}
		h.steps[e.Trainer], h.final[e.Trainer] = e.Steps, e.Final
		if !e.Final {
			h.asking = true
			h.asked[e.Trainer] = true // it knows
		}
	case Restarted:
		if e.Trainer < 0 || e.Trainer >= h.trainers {
			return out
		}
		h.asked[e.Trainer], h.told[e.Trainer] = false, false
		if h.last < 0 {
			h.steps[e.Trainer], h.final[e.Trainer] = -1, false // the new process proposes its own
		}
	}
	if h.asking {
		for i, a := range h.asked {
			if !a && !h.final[i] {
				h.asked[i] = true
				out.Ask = append(out.Ask, i)
			}
		}
	}
	if h.hub && !h.async && h.asking && h.last < 0 {
		last := int64(-1)
		for _, s := range h.steps {
			if s < 0 {
				return out
			}
			last = max(last, s)
		}
		h.last = last
	}
	if h.last >= 0 {
		for i, t := range h.told {
			if !t && !h.final[i] {
				h.told[i] = true
				out.Decide = append(out.Decide, i)
			}
		}
		out.Steps = h.last
	}
	return out
}

// Asking says whether the job was asked to stop.
func (h *Hub) Asking() bool { return h.asking }
