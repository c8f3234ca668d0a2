package rejoin

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Where a (re)started pserver starts, from the trainers' positions.
func TestPlanStart(t *testing.T) {
	L := Position{Sent: Learning, Need: Learning}
	at := func(sent, need int64) Position { return Position{Sent: sent, Need: need} }
	cases := []struct {
		name    string
		pos     []Position
		first   int64
		async   bool
		start   int64
		publish []int64
		resume  []int64
		behind  bool
		err     string
	}{
		{name: "fresh job, trainers learn", pos: []Position{L, L}, first: 0, start: 0, publish: []int64{0, 0}, resume: []int64{0, 0}},
		{name: "fresh job, start step 0", pos: []Position{{Sent: -1, Need: 0}, {Sent: -1, Need: 0}}, first: 0, start: 0, publish: []int64{0, 0}, resume: []int64{0, 0}},
		{name: "whole-job rerun, --start-step", pos: []Position{at(99, 100), at(99, 100)}, first: 100, start: 100, publish: []int64{100, 100}, resume: []int64{100, 100}},
		{name: "whole-job rerun, trainers learn", pos: []Position{L, L}, first: 100, start: 100, publish: []int64{100, 100}, resume: []int64{100, 100}},
		// trainer 0 sent every gradient of 130 (it has the parameters of
		// 130), trainer 1 waits for them: start at 130; trainer 0 re-sends.
		{name: "restart, one trainer ahead", pos: []Position{at(130, 131), at(129, 130)}, first: 100, start: 130, publish: []int64{-1, 130}, resume: []int64{130, 130}, behind: true},
		// both computing step 130 (parameters received, nothing sent yet)
		{name: "restart, both computing", pos: []Position{at(129, 131), at(129, 131)}, first: 100, start: 130, publish: []int64{-1, -1}, resume: []int64{130, 130}, behind: true},
		{name: "restart without checkpoint", pos: []Position{at(40, 41), at(40, 41)}, first: 0, start: 41, publish: []int64{41, 41}, resume: []int64{41, 41}, behind: true},
		{name: "restart, a trainer learns", pos: []Position{at(130, 131), L}, first: 100, start: 131, publish: []int64{131, 131}, resume: []int64{131, 131}, behind: true},
		{name: "trainers behind the checkpoint", pos: []Position{at(49, 50), at(49, 50)}, first: 100, start: 100, publish: []int64{100, 100}, resume: []int64{100, 100}, err: "trainer-0 is at step 50"},
		{name: "trainers two steps apart", pos: []Position{at(131, 132), at(129, 130)}, first: 100, start: 130, publish: []int64{-1, 130}, resume: []int64{130, 130}, behind: true, err: "trainer-0 is at step 132"},
		{name: "async restart", pos: []Position{at(500, 501), at(300, 300), L}, first: 700, async: true, start: 700, publish: []int64{501, 300, 700}, resume: []int64{501, 300, 700}},
		{name: "async restart past the checkpoint", pos: []Position{at(800, 801), at(300, 301)}, first: 700, async: true, start: 801, publish: []int64{801, 301}, resume: []int64{801, 301}, behind: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := PlanStart(c.pos, c.first, c.async)
			if p.Start != c.start || fmt.Sprint(p.Publish) != fmt.Sprint(c.publish) || fmt.Sprint(p.Resume) != fmt.Sprint(c.resume) || p.Behind != c.behind {
				t.Errorf("start %d publish %v resume %v behind %v, want %d %v %v %v", p.Start, p.Publish, p.Resume, p.Behind, c.start, c.publish, c.resume, c.behind)
			}
			switch {
			case c.err == "" && p.Err != nil:
				t.Errorf("error %v", p.Err)
			case c.err != "" && (p.Err == nil || !strings.Contains(p.Err.Error(), c.err)):
				t.Errorf("error %v, want one containing %q", p.Err, c.err)
			}
		})
	}
}

// What a trainer sends again to a restarted pserver that starts at s.
func TestPlanResend(t *testing.T) {
	grad := func(step int64) SentState { return SentState{Has: true, Step: step, Answer: Learning} }
	req := func(step, answer int64) SentState {
		return SentState{Has: true, Request: true, Step: step, Answer: answer}
	}
	last := func(k int64) resendStep { return resendStep{Step: k, Last: true} }
	empty := func(k int64) resendStep { return resendStep{Step: k} }
	cases := []struct {
		name  string
		m     SentState
		s     int64
		async bool
		want  []resendStep
	}{
		{name: "nothing sent yet", m: SentState{Answer: Learning}, s: 10},
		{name: "gradient the pserver applied", m: grad(9), s: 10},
		{name: "gradient of the resume step", m: grad(10), s: 10, want: []resendStep{last(10)}},
		{name: "gradient ahead (async)", m: grad(12), s: 10, async: true, want: []resendStep{last(12)}},
		{name: "request answered before the resume step", m: req(9, 9), s: 10},
		{name: "request still waiting", m: req(10, 9), s: 10, want: []resendStep{last(10)}},
		{name: "request waiting, learning", m: req(10, Learning), s: 10, want: []resendStep{last(10)}},
		// sync: a shard serves every trainer at every step, so the
		// steps whose rows the trainer has get empty requests.
		{name: "sync, moved on two steps, waits for the last", m: req(12, 11), s: 10, want: []resendStep{empty(10), empty(11), last(12)}},
		{name: "sync, moved on, answered", m: req(12, 12), s: 10, want: []resendStep{empty(10), empty(11), empty(12)}},
		{name: "async, moved on, waits for the last", m: req(12, 11), s: 10, async: true, want: []resendStep{last(12)}},
		{name: "async, answered", m: req(12, 12), s: 10, async: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := PlanResend(c.m, c.s, c.async); !slices.Equal(got, c.want) {
				t.Fatalf("planResend(%+v, %d, async=%v) = %v, want %v", c.m, c.s, c.async, got, c.want)
			}
		})
	}
}

// A sync trainer cannot go on with a pserver restarted at a step it
// already sent gradients past, or one newer than the parameters it needs.
func TestResumeConflict(t *testing.T) {
	p := "pserver-1"
	cases := []struct {
		pos   Position
		s     int64
		async bool
		err   string
	}{
		{pos: Position{Sent: 9, Need: 10}, s: 10},
		{pos: Position{Sent: 10, Need: 11}, s: 10},
		{pos: Position{Sent: Learning, Need: Learning}, s: 50},
		{pos: Position{Sent: 11, Need: 12}, s: 10, err: "it sent gradients of step 11"},
		{pos: Position{Sent: 7, Need: 8}, s: 10, err: "this trainer is at step 8"},
		{pos: Position{Sent: 7, Need: 8}, s: 10, async: true},
	}
	for _, c := range cases {
		err := ResumeConflict(p, c.pos, c.s, c.async)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%+v at %d: %v, want none", c.pos, c.s, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "pserver-1 restarted at step 10") || !strings.Contains(err.Error(), "--checkpoint-dir")):
			t.Errorf("%+v at %d: %v, want one saying %q, the pserver and the way out", c.pos, c.s, err, c.err)
		}
	}
}
