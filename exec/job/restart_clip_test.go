package job

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/trainer"
	"github.com/psgraph/psgraph/internal/testfix"
	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
)

const clipModel = "../../testdata/restart/digits-clip-norm.yaml"

// A pserver of a job with train.clip.norm restarted into the running job
// when every trainer sent it its gradients of step 100 but none has its
// partial norm of 100 yet (the old process died after it had every
// gradient, before its clip@part reached the trainers). The trainers are
// not done with step 100 there: each tells the new process it must take
// their gradients of 100 again (rejoin.Where counts a step whose reply is
// missing as not sent), it starts at 100, the step of its checkpoint, the
// trainers re-send those gradients, and the job ends bitwise where the
// undisturbed job ends. Counting the gradients as sent started the new
// process at 101, where no partial norm of 100 comes: the job stopped
// ("the lost steps cannot be recovered"), as 7 of 50 unstaged restarts did.
func TestPServerRestartClipNormInmem(t *testing.T) {
	const steps = 300
	g := load(t, clipModel)
	plain := filepath.Join(t.TempDir(), "plain.safetensors")
	runInmemJob(t, g, 2, 2, false, trainer.RunOptions{Steps: steps, Save: plain, Log: zerolog.Nop()}, 0)
	grads := gradsTo(t, g, transport.PServer(1))

	held := newSignal()
	rc := restartCase{g: g, steps: steps, every: 50, killAfter: 100, victim: 1}
	rc.wrapVictim = func(ep transport.Endpoint) transport.Endpoint {
		return &hookedEP{Endpoint: ep, beforeSend: func(ctx context.Context, to transport.NodeID, step int64, v string) error {
			if v == ops.ClipPart(1) && step == 100 {
				held.fire()
				<-ctx.Done() // dies here
				return ctx.Err()
			}
			return nil
		}}
	}
	rc.ready = held.wait
	r := runRestartCase(t, rc)
	resent := resentBy(t, r.trainers)
	t.Logf("stopped with checkpoint %d; restarted at step %d; the trainers re-sent %v messages", r.killedAt, r.second.First, resent)
	if r.killedAt != 100 || r.second.First != 100 || fmt.Sprint(resent) != fmt.Sprint([]int{grads, grads}) {
		t.Errorf("checkpoint %d, restarted at %d, the trainers re-sending %v; want 100, 100 and their %d gradients each", r.killedAt, r.second.First, resent, grads)
	}
	compareParams(t, plain, r.saved[0], 0) // nothing lost
	compareParams(t, r.saved[0], r.saved[1], 0)
}

// gradsTo is how many gradient transfers a trainer of g's 2x2 job sends
// pserver p.
func gradsTo(t *testing.T, g *dsl.Graph, p transport.NodeID) int {
	t.Helper()
	plan, err := partition.Split(g, partition.Options{Trainers: 2, PServers: 2})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := plan.Trainer.Transfers(plan.Trainer.Batch(), nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, x := range ts {
		if !x.Recv && x.Kind == dsl.GradTransfer && x.Peer == p {
			n++
		}
	}
	if n == 0 {
		t.Fatalf("the plan sends %s no gradient", p)
	}
	return n
}

// The same restart wherever it falls, 50 times (go test -long -run
// Soak): every run finishes (TestPServerRestartInmem's checks: accuracy,
// one model on both trainers, a start at or after the checkpoint).
func TestPServerRestartClipNormSoak(t *testing.T) {
	testfix.Long(t)
	g := load(t, clipModel)
	const runs = 50
	passed := 0
	for i := range runs {
		if t.Run(fmt.Sprintf("run-%d", i), func(t *testing.T) {
			r := runRestartCase(t, restartCase{g: g, steps: 300, every: 50, killAfter: 100, victim: 1})
			for i, s := range r.sums {
				if acc := s.Metrics["acc"]; acc < 0.9 {
					t.Errorf("trainer-%d: digits accuracy %.3f after a pserver restart, want >= 0.9", i, acc)
				}
			}
			compareParams(t, r.saved[0], r.saved[1], 0)
			if r.second.First < r.killedAt {
				t.Errorf("the restarted pserver started at step %d, before its checkpoint %d", r.second.First, r.killedAt)
			}
		}) {
			passed++
		}
	}
	t.Logf("%d of %d restarts with clip.norm finished", passed, runs)
	if passed != runs {
		t.Errorf("%d of %d restarts with clip.norm finished, want all", passed, runs)
	}
}
