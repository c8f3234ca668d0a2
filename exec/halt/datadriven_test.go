package halt

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/internal/testfix"
)

var update = flag.Bool("update", false, "rewrite the expected output of testdata/*.txt")

// The stop protocol's scenarios, one file each under testdata: a command
// per block, then "----" and what the state machines answer. go test
// -update rewrites the answers (review the diff). The end-to-end tests
// (cmd/halt_test.go) stop real jobs; each path they take has its file
// here, driven event by event.
func TestScenarios(t *testing.T) {
	testfix.Scenarios(t, "testdata/*.txt", *update, func() func(*testing.T, string) string { return (&scenario{}).run })
}

type scenario struct {
	trainer *Trainer
	hub     *Hub
}

func (s *scenario) run(t *testing.T, cmd string) string {
	f := strings.Fields(cmd)
	a := map[string]string{}
	for _, x := range f[1:] {
		k, v, ok := strings.Cut(x, "=")
		if !ok {
			v = "true"
		}
		a[k] = v
	}
	n := func(k string) int64 {
		v, err := strconv.ParseInt(a[k], 10, 64)
		if err != nil {
			t.Fatalf("%s: %s=%q: %v", cmd, k, a[k], err)
		}
		return v
	}
	switch f[0] {
	case "trainer":
		s.trainer = NewTrainer(a["async"] == "true")
		return "ok"
	case "started":
		return s.trainerStep(Started{First: n("first")})
	case "asked":
		return s.trainerStep(Asked{})
	case "enter":
		return s.trainerShow(s.trainer.Enter(n("step")))
	case "decided":
		return s.trainerStep(Decided{Steps: n("steps")})
	case "ended":
		return s.trainerStep(Ended{Steps: n("steps")})
	case "hub-restarted":
		return s.trainerStep(HubRestarted{})
	case "pserver":
		s.hub = NewHub(int(n("trainers")), a["async"] == "true", a["hub"] == "true")
		return "ok"
	case "signal":
		return showSends(s.hub.Step(Signal{}))
	case "proposed":
		return showSends(s.hub.Step(Proposed{Trainer: int(n("trainer")), Steps: n("steps"), Final: a["final"] == "true"}))
	case "restarted":
		return showSends(s.hub.Step(Restarted{Trainer: int(n("trainer"))}))
	}
	t.Fatalf("unknown command %q", cmd)
	return ""
}

func (s *scenario) trainerStep(ev TrainerEvent) string { return s.trainerShow(s.trainer.Step(ev)) }

func (s *scenario) trainerShow(act TrainerAction) string {
	var out string
	switch a := act.(type) {
	case None:
		out = "nothing"
	case Propose:
		out = fmt.Sprintf("propose %d steps", a.Steps)
		if a.Final {
			out += " (final)"
		}
	case Run:
		out = "run the step"
	case Wait:
		out = "wait for the decision"
	case Stop:
		out = "stop: the steps are over"
	case Fail:
		out = "error: " + a.Err.Error()
	}
	last := "undecided"
	if l := s.trainer.Last(); l >= 0 {
		last = strconv.FormatInt(l, 10)
	}
	return fmt.Sprintf("%s\ntrainer: entered %d, last %s", out, s.trainer.entered, last)
}

func showSends(x Sends) string {
	var out []string
	names := func(is []int) string {
		var s []string
		for _, i := range is {
			s = append(s, fmt.Sprintf("trainer-%d", i))
		}
		return strings.Join(s, " ")
	}
	if len(x.Ask) > 0 {
		out = append(out, "ask "+names(x.Ask))
	}
	if len(x.Decide) > 0 {
		out = append(out, fmt.Sprintf("decide %d steps: %s", x.Steps, names(x.Decide)))
	}
	if len(out) == 0 {
		return "nothing"
	}
	return strings.Join(out, "\n")
}
