package rejoin

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/internal/testfix"
)

var update = flag.Bool("update", false, "rewrite the expected output of testdata/*.txt")

// The restart protocol's scenarios, one file each under testdata: a
// command per block, then "----" and what the state machines answer.
// go test -update rewrites the answers (review the diff). Every restart
// scenario the end-to-end tests run (exec/job/restart_test.go,
// cmd/reliability_test.go) has its file here, driven event by event.
func TestScenarios(t *testing.T) {
	testfix.Scenarios(t, "testdata/*.txt", *update, func() func(*testing.T, string) string { return (&scenario{}).run })
}

// scenario is the state of one file: a trainer's link, a pserver's
// gathering and a part.
type scenario struct {
	link   *Link
	gather *Gather
	part   *Part
}

type args map[string]string

func parseArgs(t *testing.T, fields []string) args {
	a := args{}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			v = "true"
		}
		a[k] = v
	}
	return a
}

func (a args) int(t *testing.T, k string, def int64) int64 {
	v, ok := a[k]
	if !ok {
		return def
	}
	if v == "learning" {
		return Learning
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%s: %v", k, v, err)
	}
	return n
}

func (a args) ints(t *testing.T, k string) []int64 {
	var out []int64
	for _, f := range strings.Split(a[k], ",") {
		if f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("%s=%s: %v", k, a[k], err)
		}
		out = append(out, n)
	}
	return out
}

func (a args) pos(t *testing.T) Position {
	return Position{Sent: a.int(t, "sent", Learning), Need: a.int(t, "need", Learning), Rejoin: a["rejoin"] == "true",
		Steps: a.int(t, "steps", 100), Batch: a.int(t, "batch", 16)}
}

func step(n int64) string {
	if n == Learning {
		return "learning"
	}
	return strconv.FormatInt(n, 10)
}

func showPos(p Position) string {
	return fmt.Sprintf("sent=%s need=%s rejoin=%v", step(p.Sent), step(p.Need), p.Rejoin)
}

func showErr(err error) string {
	if err == nil {
		return "ok"
	}
	return "error: " + err.Error()
}

func (s *scenario) run(t *testing.T, cmd string) string {
	f := strings.Fields(cmd)
	a := parseArgs(t, f[1:])
	if _, rest, ok := strings.Cut(cmd, " err="); ok {
		a["err"] = rest // the rest of the line
	}
	switch f[0] {
	// A trainer's link to one pserver.
	case "link":
		s.link = &Link{Peer: a["peer"], Async: a["async"] == "true", Told: a.int(t, "told", 0)}
		return "ok"
	case "checked":
		return s.linkStep(Checked{Now: a.int(t, "now", 0), Pos: a.pos(t)})
	case "lost":
		return s.linkStep(Lost{})
	case "back":
		return s.linkStep(Back{Now: a.int(t, "now", 0), Pos: a.pos(t)})
	case "gave-up":
		return s.linkStep(GaveUp{Err: errors.New(a["err"])})
	case "resumed":
		return s.linkStep(Resumed{Inc: a.int(t, "inc", 0), Step: a.int(t, "step", 0)})
	case "interrupted":
		return s.linkStep(Interrupted{})
	// What a trainer tells a pserver and sends it again.
	case "where":
		var sent []SentState
		for _, x := range a.ints(t, "sent") {
			sent = append(sent, SentState{Has: true, Step: x})
		}
		for _, x := range a.ints(t, "requested") {
			sent = append(sent, SentState{Has: true, Request: true, Step: x})
		}
		if a["unsent"] == "true" {
			sent = append(sent, SentState{})
		}
		got := a.ints(t, "got")
		if a["got-none"] == "true" {
			got = append(got, Learning)
		}
		replies := a.ints(t, "replied")
		if a["replied-none"] == "true" {
			replies = append(replies, Learning)
		}
		return showPos(Where(a.int(t, "start", 0), sent, got, replies, 100, 16))
	case "plan-resend":
		m := SentState{Has: a["has"] != "false", Request: a["request"] == "true", Step: a.int(t, "step", 0), Answer: a.int(t, "answer", Learning),
			Counted: a["counted"] == "true", Prev: a["prev"] == "true"}
		steps := PlanResend(m, a.int(t, "resume", 0), a["async"] == "true")
		if len(steps) == 0 {
			return "none"
		}
		var out []string
		for _, r := range steps {
			if r.Last {
				out = append(out, fmt.Sprintf("step %d: the last message", r.Step))
			} else if r.Prev {
				out = append(out, fmt.Sprintf("step %d: the message before the last", r.Step))
			} else {
				out = append(out, fmt.Sprintf("step %d: an empty request", r.Step))
			}
		}
		return strings.Join(out, "\n")
	// A pserver incarnation before its first step.
	case "gather":
		s.gather = NewGather(int(a.int(t, "trainers", 1)), a.int(t, "restored", -1), a["async"] == "true", a["waits"] == "true")
		return fmt.Sprintf("first step %d", s.gather.first)
	case "heard":
		return showGather(s.gather.Step(Heard{Trainer: int(a.int(t, "trainer", 0)), Pos: a.pos(t)}))
	case "timed-out":
		return showGather(s.gather.Step(TimedOut{}))
	// A pserver part while it serves.
	case "part":
		s.part = NewPart(a.ints(t, "started"), a.int(t, "first", 0))
		return "ok"
	case "check":
		sends := s.part.Check(a.ints(t, "now"), a.int(t, "step", 0))
		if len(sends) == 0 {
			return "receive"
		}
		var out []string
		for _, x := range sends {
			out = append(out, fmt.Sprintf("send trainer-%d the parameters of steps %d..%d", x.To, x.From, x.Through))
		}
		return strings.Join(append(out, "receive"), "\n")
	case "table-restart":
		return showErr(TableRestart(int(a.int(t, "trainer", 0)), a["var"], a.int(t, "step", 0), a.int(t, "started", 0), a.int(t, "now", 0)))
	}
	t.Fatalf("unknown command %q", cmd)
	return ""
}

func (s *scenario) linkStep(ev LinkEvent) string {
	a := s.link.Step(ev)
	var out string
	switch a := a.(type) {
	case Proceed:
		out = "proceed"
		if a.Blip {
			out = "proceed (the same process is back: the receive goes on)"
		}
	case WaitBack:
		out = "wait for the pserver to come back"
		if a.First {
			out += " (say it was lost)"
		}
	case Tell:
		out = fmt.Sprintf("drop what came from the old process; tell incarnation %d %s", a.Inc, showPos(a.Pos))
	case Resend:
		out = fmt.Sprintf("resend what incarnation %d lacks from step %d; proceed", a.Inc, a.Step)
	case Fail:
		out = showErr(a.Err)
	default:
		out = fmt.Sprintf("%T", a)
	}
	return fmt.Sprintf("%s\nlink: %s, told %d", out, s.link.Phase, s.link.Told)
}

func showGather(a GatherAction) string {
	switch a := a.(type) {
	case Wait:
		return "wait"
	case StartTimer:
		return "start the timer: " + a.Reason
	case Stop:
		return showErr(a.Err)
	case Start:
		p := a.Plan
		out := []string{fmt.Sprintf("start at step %d (behind: %v)", p.Start, p.Behind)}
		for i := range p.Publish {
			pub := "nothing"
			if p.Publish[i] >= 0 {
				pub = fmt.Sprintf("the parameters of step %d", p.Publish[i])
			}
			out = append(out, fmt.Sprintf("trainer-%d: send %s, resume %d", i, pub, p.Resume[i]))
		}
		if p.Err != nil {
			out = append(out, showErr(p.Err))
		}
		if a.Note != "" {
			level := "info"
			if a.Warn {
				level = "warn"
			}
			out = append(out, level+": "+a.Note)
		}
		return strings.Join(out, "\n")
	}
	return fmt.Sprintf("%T", a)
}
