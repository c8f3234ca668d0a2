package halt

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// simTrainer is one trainer of a simulated job.
type simTrainer struct {
	m       *Trainer
	done    int64 // steps completed
	in      bool  // in a step
	waiting bool  // Enter said Wait; it asks again once told the decision
	over    bool
}

// simMsg is a message in flight: to trainer To (To >= 0) or to a pserver
// (To = -1-index).
type simMsg struct {
	to int
	ev any
}

// simulate runs a job of n trainers and two pservers (pserver-0 the hub)
// whose nodes get signals at random moments and whose messages arrive in
// a random order, until no node can do anything. Sync trainers keep the
// pservers' lockstep: a trainer finishes step k only once every trainer
// finished step k-1. steps > 0: the trainers also end there by
// themselves. It returns each trainer's steps, or an error: a deadlock
// (nodes left that can do nothing), a failed protocol.
func simulate(r *rand.Rand, n int, async bool, steps int64, signals []int) ([]int64, error) {
	ts := make([]*simTrainer, n)
	for i := range ts {
		ts[i] = &simTrainer{m: NewTrainer(async)}
	}
	hubs := []*Hub{NewHub(n, async, true), NewHub(n, async, false)}
	var inflight []simMsg
	fromTrainer := func(i int, a TrainerAction) error {
		switch a := a.(type) {
		case Propose:
			inflight = append(inflight, simMsg{-1, Proposed{Trainer: i, Steps: a.Steps, Final: a.Final}})
		case Fail:
			return a.Err
		}
		return nil
	}
	fromPServer := func(s Sends) {
		for _, i := range s.Ask {
			inflight = append(inflight, simMsg{i, Asked{}})
		}
		for _, i := range s.Decide {
			inflight = append(inflight, simMsg{i, Decided{Steps: s.Steps}})
		}
	}
	for i, t := range ts {
		if err := fromTrainer(i, t.m.Step(Started{First: 0})); err != nil {
			return nil, err
		}
	}
	pending := append([]int(nil), signals...) // nodes still to get a signal: trainers i, pservers -1-j
	for iter := 0; ; iter++ {
		if iter > 100000 {
			return nil, fmt.Errorf("no end after %d moves", iter)
		}
		type move func() error
		var moves []move
		for i, t := range ts {
			switch {
			case t.over || t.waiting:
			case !t.in:
				moves = append(moves, func() error {
					switch a := t.m.Enter(t.done).(type) {
					case Run:
						t.in = true
					case Wait:
						t.waiting = true
					case Stop:
						t.over = true
						return fromTrainer(i, t.m.Step(Ended{Steps: t.done}))
					default:
						return fmt.Errorf("enter: %T", a)
					}
					return nil
				})
			default:
				can := true
				for _, u := range ts {
					can = can && (async || u.done >= t.done)
				}
				if can {
					moves = append(moves, func() error {
						t.in = false
						t.done++
						if steps > 0 && t.done == steps {
							t.over = true
							return fromTrainer(i, t.m.Step(Ended{Steps: t.done}))
						}
						return nil
					})
				}
			}
		}
		for k := range inflight {
			moves = append(moves, func() error {
				m := inflight[k]
				inflight = append(inflight[:k:k], inflight[k+1:]...)
				if m.to < 0 {
					fromPServer(hubs[-1-m.to].Step(m.ev.(HubEvent)))
					return nil
				}
				t := ts[m.to]
				a := t.m.Step(m.ev.(TrainerEvent))
				if _, ok := m.ev.(Decided); ok {
					t.waiting = false
				}
				return fromTrainer(m.to, a)
			})
		}
		if len(pending) > 0 {
			moves = append(moves, func() error {
				who := pending[0]
				pending = pending[1:]
				if who < 0 {
					fromPServer(hubs[-1-who].Step(Signal{}))
					return nil
				}
				return fromTrainer(who, ts[who].m.Step(Asked{}))
			})
		}
		if len(moves) == 0 {
			break
		}
		if err := moves[r.IntN(len(moves))](); err != nil {
			return nil, err
		}
	}
	out := make([]int64, n)
	for i, t := range ts {
		if !t.over || t.in {
			return nil, fmt.Errorf("deadlock: trainer-%d is stuck after %d steps (waiting %v, in a step %v)", i, t.done, t.waiting, t.in)
		}
		out[i] = t.done
	}
	return out, nil
}

// However the signals fall (any node, any order, one or several) and
// however the messages interleave, a sync job's trainers end at one
// common step, never stuck: 20,000 random runs of 1 to 4 trainers, with
// and without a last step. An async job's trainers all end too.
func TestStopProtocolSimulated(t *testing.T) {
	r := rand.New(rand.NewPCG(36, 1))
	for run := range 20000 {
		n := 1 + r.IntN(4)
		async := run%4 == 3
		steps := int64(0)
		if r.IntN(3) == 0 {
			steps = 1 + int64(r.IntN(12))
		}
		// who gets a signal: a random non-empty sequence of nodes (trainers
		// i, pservers -1, -2), repeats allowed (a node signalled twice)
		var signals []int
		for len(signals) == 0 || r.IntN(2) == 0 {
			signals = append(signals, r.IntN(n+2)-2)
		}
		got, err := simulate(r, n, async, steps, signals)
		if err != nil {
			t.Fatalf("run %d (%d trainers, async %v, steps %d, signals %v): %v", run, n, async, steps, signals, err)
		}
		for i := range got {
			if !async && got[i] != got[0] {
				t.Fatalf("run %d (%d trainers, steps %d, signals %v): the trainers ended at steps %v", run, n, steps, signals, got)
			}
			if steps > 0 && got[i] > steps {
				t.Fatalf("run %d: trainer-%d ran %d steps, past its last %d", run, i, got[i], steps)
			}
		}
	}
}
