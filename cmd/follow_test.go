package cmd_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/psgraph/psgraph/internal/testfix"
)

// servedVersion is the version a server reports (-1: none yet) and
// whether it is ready.
func servedVersion(t *testing.T, base, model string) (int64, bool) {
	t.Helper()
	var meta struct {
		Versions []string `json:"versions"`
	}
	r, err := http.Get(base + "/v2/models/" + model)
	if err != nil {
		return -1, false
	}
	json.NewDecoder(r.Body).Decode(&meta)
	r.Body.Close()
	v := int64(-1)
	if len(meta.Versions) == 1 {
		v, _ = strconv.ParseInt(meta.Versions[0], 10, 64)
	}
	ready, err := http.Get(base + "/v2/health/ready")
	if err != nil {
		return v, false
	}
	ready.Body.Close()
	return v, ready.StatusCode == http.StatusOK
}

// waitVersion waits until the server is ready at a version of at least v
// and returns it.
func waitVersion(t *testing.T, p *proc, base, model string, v int64) int64 {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, ready := servedVersion(t, base, model)
		if ready && got >= v {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: version %d (ready %v) after 90 s, want ready at %d or later\n%s", p.name, got, ready, v, p.stderrText())
		}
	}
}

// A replica follows a running 2x2 job (a table sharded over both pservers
// and a dense parameter): ready once it holds the pservers' state, its
// version climbing with the job's steps; killed and started again, it is
// caught up again; a pserver killed and restarted from its checkpoint is
// subscribed to again; and after the job it serves the last step, its
// predictions psgraph predict's with trainer 0's saved model. Nothing
// else was restarted for either.
func TestServeFollowsJob(t *testing.T) {
	followJob(t, followCase{model: "testdata/sparse/emb-adagrad.yaml", name: "sparse-reference", data: "testdata/sparse/ids.csv",
		steps: 3000, batch: 8, rows: 64, pserverArgs: []string{"--init-from", "testdata/sparse/init.safetensors"}})
}

// TestServeFollowsJob for a dynamic table (examples/ctr-dynamic.yaml with
// a ttl of 20 steps, so rows are evicted and admitted again all along,
// on a drifting vocabulary): the pservers publish their shards' rows by
// key and their watermarks; the replica, killed and restarted, and a
// pserver killed and restarted from its checkpoint (its shard sent whole
// again) catch up; after the job its predictions are psgraph predict's
// with trainer 0's saved model, which holds the live rows only. Behind
// -long: by default TestMirrorReadsAsTheShards (exec/dyntable) and
// TestUpdatesWriteDynamicTableRowsByKey (exec/serve) show a replica's
// mirror of dynamic shards in process (rows by key, watermarks, a shard
// sent whole again), and TestServeFollowsJob and
// TestServeFollowsTrainerState a replica following real processes
// through restarts; -long adds a dynamic table followed end to end.
func TestServeFollowsDynamicJob(t *testing.T) {
	testfix.Long(t)
	model, data := ctrDynamicExample(t)
	followJob(t, followCase{model: model, name: "ctr-dynamic", data: data, steps: 1200, batch: 64, rows: 300})
}

// TestServeFollowsJob for a model with state its trainers hold
// (testdata/norm/bn-mlp.yaml: batch_norm's running statistics, which no
// pserver has): trainer 0 pushes its state to pserver 0, which holds the
// newest for the replicas; the replica is ready once it has it, and
// after the job (pserver 0 killed and restarted meanwhile, the push
// dialing it again) its predictions are psgraph predict's with trainer
// 0's saved model, running statistics included.
func TestServeFollowsTrainerState(t *testing.T) {
	followJob(t, followCase{model: "testdata/norm/bn-mlp.yaml", name: "bn-mlp", data: "testdata/norm/bn.csv", steps: 3000, batch: 16, rows: 64, trainerState: true})
}

// followCase is a job a replica follows: its model, its data's rows to
// compare predictions on, its steps and batch, and the pservers' own
// arguments.
type followCase struct {
	model, name, data string
	steps, batch      int
	rows              int
	pserverArgs       []string
	// trainerState: the replica is ready only once the trainers run
	// (trainer 0 pushes its state), not on the pservers' initial state.
	trainerState bool
}

func followJob(t *testing.T, c followCase) {
	t.Parallel()
	steps, model := int64(c.steps), c.model
	dir := t.TempDir()
	plan, ck, final := filepath.Join(dir, "plan"), filepath.Join(dir, "ck"), filepath.Join(dir, "final.safetensors")
	if r := psgraph(t, "split", model, "--trainers", "2", "--pservers", "2", "-o", plan); r.code != 0 {
		t.Fatalf("split: exit %d\n%s", r.code, r.stderr)
	}
	addrs := []string{freeAddr(t), freeAddr(t)}
	env := []string{"PSGRAPH_TOKEN=secret"}
	pserver := func(name string, i int) *proc {
		args := append([]string{"run", "--role", "pserver", "--index", fmt.Sprint(i), "--plan", plan, "--listen", addrs[i],
			"--checkpoint-dir", ck, "--checkpoint-every", "200", "--trainer-timeout", "30s", "--log-every", "500"}, c.pserverArgs...)
		return start(t, name, env, args...)
	}
	ps0, ps1 := pserver("pserver-0", 0), pserver("pserver-1", 1)
	serveAddr := freeAddr(t)
	base := "http://" + serveAddr
	replica := func(name string) *proc {
		return start(t, name, env, "serve", model, "--plan", plan, "--pserver-endpoints", strings.Join(addrs, ","), "--listen", serveAddr)
	}
	r0 := replica("replica")
	all := []*proc{ps0, ps1, r0}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range all {
				t.Logf("%s stderr:\n%s", p.name, p.stderrText())
			}
		}
	})
	if !c.trainerState {
		waitVersion(t, r0, base, c.name, 0) // the initial parameters
	}
	var trainers []*proc
	for i := range 2 {
		args := []string{"run", "--role", "trainer", "--index", fmt.Sprint(i), "--plan", plan, "--pserver-endpoints", strings.Join(addrs, ","),
			"--steps", fmt.Sprint(steps), "--batch", fmt.Sprint(c.batch), "--log-every", "500", "--connect-timeout", "30s"}
		if i == 0 {
			args = append(args, "--save", final)
		}
		trainers = append(trainers, start(t, fmt.Sprintf("trainer-%d", i), env, args...))
	}
	all = append(all, trainers...)
	seen := waitVersion(t, r0, base, c.name, 100)
	// The replica, killed and started again, catches up.
	r0.cmd.Process.Kill()
	r0.wait(t, 10*time.Second)
	r1 := replica("replica (restarted)")
	all = append(all, r1)
	seen = waitVersion(t, r1, base, c.name, seen+1)
	// A pserver killed and restarted from its checkpoint: the replica
	// subscribes to the new process.
	waitForLine(t, ps0, "checkpoint saved")
	ps0.cmd.Process.Kill()
	ps0.wait(t, 10*time.Second)
	ps0b := pserver("pserver-0 (restarted)", 0)
	all = append(all, ps0b)
	waitForLine(t, ps0b, "a replica subscribed")
	for _, p := range trainers {
		if r := p.wait(t, 120*time.Second); r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", p.name, r.code, r.stderr)
		}
	}
	for _, p := range []*proc{ps0b, ps1} {
		if r := p.wait(t, 30*time.Second); r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", p.name, r.code, r.stderr)
		}
	}
	if v := waitVersion(t, r1, base, c.name, steps); v != steps {
		t.Errorf("after the job the replica serves step %d, want %d", v, steps)
	}
	t.Logf("the replica saw step %d before the pserver restart and ends at %d", seen, steps)
	// Its predictions are psgraph predict's with the saved model.
	servesAsPredict(t, base, model, c.name, final, c.data, c.rows, fmt.Sprint(steps), "the replica")
	r1.cmd.Process.Signal(syscall.SIGTERM)
	if r := r1.wait(t, 30*time.Second); r.code != 0 {
		t.Errorf("replica: exit %d on SIGTERM\n%s", r.code, r.stderr)
	}
}

// psgraph train --serve starts a replica beside the job: after the job it
// serves the last step (predict's outputs with the saved model), train
// prints trainer 0's summary, and SIGTERM stops train with exit 0.
func TestTrainServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	save := filepath.Join(dir, "digits.safetensors")
	addr := freeAddr(t)
	p := start(t, "train", nil, "train", "examples/digits-mlp.yaml", "--trainers", "2", "--pservers", "2", "--steps", "300", "--save", save, "--serve", addr)
	waitForLine(t, p, "the job is done; replica-0 serves its last step at http://"+addr)
	if v := waitVersion(t, p, "http://"+addr, "digits-mlp", 300); v != 300 {
		t.Fatalf("the replica serves step %d, want 300", v)
	}
	servesAsPredict(t, "http://"+addr, "examples/digits-mlp.yaml", "digits-mlp", save, "examples/data/digits.csv", 40, "300", "the replica")
	p.cmd.Process.Signal(syscall.SIGTERM)
	r := p.wait(t, 30*time.Second)
	if r.code != 0 || !strings.Contains(r.stdout, `"role":"trainer-0"`) {
		t.Errorf("train: exit %d on SIGTERM, stdout %q; want 0 and trainer-0's summary\n%s", r.code, r.stdout, r.stderr)
	}
}
