package rejoin

import (
	"fmt"
	"math"
)

// The restart protocol's decisions, as pure functions of what each side
// knows, so a table test covers every case (plan_test.go): where a pserver
// that heard every trainer starts (PlanStart), whether a trainer can go on
// with a restarted pserver (ResumeConflict), and what it sends that
// pserver again (PlanResend).

// StartPlan is where a pserver that heard every trainer's position starts.
type StartPlan struct {
	Start   int64   // the parts' first step
	Publish []int64 // per trainer: the step of the parameters to send it; -1: none
	Resume  []int64 // per trainer: the step its resume message names
	Behind  bool    // the trainers are past the restored state: updates are lost
	Err     error   // the trainers cannot continue with this pserver
}

// PlanStart decides, from the trainers' positions and the step first the
// pserver restored (0 without a checkpoint), where it starts.
//
// Sync: s0 = max(L+1, first), L the smallest known Sent: a trainer that
// sent gradients of s0 re-sends them, one at s0-1 computes them. Trainers
// that learn (or fresh ones: Sent = -1) fit any s0 >= first. Every trainer
// that does not hold the parameters of s0 gets them.
//
// Async: each trainer gets the parameters of the step it needs; the
// parts' step counter (for checkpoints) continues above first and above
// every trainer's step.
func PlanStart(pos []Position, first int64, async bool) StartPlan {
	p := StartPlan{Start: first, Publish: make([]int64, len(pos)), Resume: make([]int64, len(pos))}
	low, high, known := int64(math.MaxInt64), int64(math.MinInt64), false
	for _, q := range pos {
		if q.Known() {
			known = true
			low, high = min(low, q.Sent), max(high, q.Sent)
		}
	}
	if known {
		if async {
			p.Start = max(first, high+1)
		} else {
			p.Start = max(first, low+1)
		}
	}
	p.Behind = p.Start > first
	for i, q := range pos {
		switch {
		case !q.Known():
			p.Publish[i], p.Resume[i] = p.Start, p.Start
		case async:
			p.Publish[i], p.Resume[i] = q.Need, q.Need
		default:
			p.Resume[i], p.Publish[i] = p.Start, -1
			if q.Need <= p.Start {
				p.Publish[i] = p.Start
			}
			if (q.Need < p.Start || q.Sent > p.Start) && p.Err == nil {
				p.Err = fmt.Errorf("trainer-%d is at step %d (it sent gradients of step %d) but this pserver can only start at step %d (from its checkpoint of step %d and the other trainers' positions); the job cannot continue: rerun it from its checkpoints (psgraph train --checkpoint-dir)", i, q.Need, q.Sent, p.Start, first)
			}
		}
	}
	return p
}

// ResumeConflict is the error of a sync trainer at pos that a pserver p,
// restarted, resumes at step s it cannot continue from: it already sent
// gradients past s, or needs parameters older than s. The steps between
// are lost (nil when none are, or async).
func ResumeConflict(p string, pos Position, s int64, async bool) error {
	if async || !pos.Known() || (pos.Need >= s && pos.Sent <= s) {
		return nil
	}
	return fmt.Errorf("%s restarted at step %d, but this trainer is at step %d (it sent gradients of step %d and needs parameters of step %d); the lost steps cannot be recovered: rerun the job from its checkpoints (psgraph train --checkpoint-dir)", p, s, pos.Need, pos.Sent, pos.Need)
}

// SentState is what PlanResend needs of a trainer's last message on one
// transfer (the trainer's record of it).
type SentState struct {
	Has     bool  // a message was sent
	Request bool  // a table's request (fetch_rows), not a gradient
	Step    int64 // the step it was sent for
	Answer  int64 // a request's: last step of the reply received (Learning: none)
	// Counted: a dynamic table's request, whose keys' sightings the shard
	// counts (admission, last seen), so a step's request is sent again
	// whole, not empty; Prev: the trainer kept the request of Step-1 too.
	Counted, Prev bool
}

// ResendStep is one message PlanResend sends again: for step, the last
// message's payload (last) or an empty request.
type ResendStep struct {
	Step int64
	Last bool
	// Prev: the message before the last (a counted request of Step-1).
	Prev bool
}

// PlanResend lists what a trainer sends again on one transfer to a
// pserver restarted at step s. A gradient: the last one, when its step is
// not below s (the pserver has not applied it). A table's request: one
// for every step from s to the last, the last one's ids if the trainer
// still waits for their rows and an empty request for a step whose rows
// it already has (it moved on), because a sync pserver serves every
// trainer at every step before it takes the step's gradients; a counted
// request (a dynamic table's) is sent again whole for the steps the
// trainer kept (the last and, with Prev, the one before), so the shard
// counts its keys' sightings as the lost process did. Async
// pservers serve what comes: only a request still waiting is re-sent.
func PlanResend(m SentState, s int64, async bool) []ResendStep {
	if !m.Has || m.Step < s {
		return nil
	}
	if !m.Request {
		return []ResendStep{{Step: m.Step, Last: true}}
	}
	var out []ResendStep
	for k := s; k <= m.Step; k++ {
		waiting := m.Answer == Learning || m.Answer < k
		switch {
		case waiting && k == m.Step:
			out = append(out, ResendStep{Step: k, Last: true})
		case waiting || async: // waits for nothing older than its last request
		case m.Counted && k == m.Step:
			out = append(out, ResendStep{Step: k, Last: true})
		case m.Counted && m.Prev && k == m.Step-1:
			out = append(out, ResendStep{Step: k, Prev: true})
		default:
			out = append(out, ResendStep{Step: k})
		}
	}
	return out
}
