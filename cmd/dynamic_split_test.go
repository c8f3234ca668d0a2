package cmd_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/internal/testfix"
)

// examples/ctr-dynamic.yaml trains as a 2x2 job over real loopback
// sockets, sync and async: psgraph train, and in sync mode the same plan
// started role by role, as the Kubernetes manifests start it, each
// trainer 0 saving the whole table (keys and rows from both pservers);
// the sync runs save the same file byte for byte (the job is
// deterministic), and psgraph eval and predict read it. The async train
// runs with -long only: by default TestDynamicSplitAsyncInmem (exec/job)
// covers an async job with a dynamic table, and TestTrainSyncAndAsyncOnDigits
// an async psgraph train.
func TestTrainCTRDynamicSplit(t *testing.T) {
	t.Parallel()
	file, data := ctrDynamicExample(t)
	dir := filepath.Dir(file)
	const steps = "30"
	modes := []string{"sync"}
	if testfix.IsLong() {
		modes = append(modes, "async")
	}
	for _, mode := range modes {
		save := filepath.Join(dir, mode+".safetensors")
		r := psgraph(t, "train", file, "--trainers", "2", "--pservers", "2", "--mode", mode, "--steps", steps, "--save", save)
		if r.code != 0 {
			t.Fatalf("train --mode %s: exit %d\n%s", mode, r.code, r.stderr)
		}
		ts, _, err := modelfile.LoadSafetensors(save)
		if err != nil {
			t.Fatal(err)
		}
		keys, rows := ts["emb.keys"], ts["emb"]
		if keys == nil || rows == nil || len(keys.L) == 0 || rows.Shape[0] != len(keys.L) || rows.Shape[1] != 16 {
			t.Fatalf("%s: saved emb.keys %v, emb %v; want the live keys and their rows", mode, keys, rows)
		}
		if r := psgraph(t, "eval", file, "--init-from", save, "--data", data); r.code != 0 || !strings.Contains(r.stdout, `"auc":`) {
			t.Errorf("eval of the %s job's model: exit %d\n%s%s", mode, r.code, r.stdout, r.stderr)
		}
	}
	if r := psgraph(t, "predict", file, "--init-from", filepath.Join(dir, "sync.safetensors"), "--data", data, "-o", filepath.Join(dir, "pred.csv")); r.code != 0 {
		t.Errorf("predict: exit %d\n%s", r.code, r.stderr)
	}

	plan := filepath.Join(dir, "plan")
	ok(t, psgraph(t, "split", file, "--trainers", "2", "--pservers", "2", "-o", plan))
	// A pserver's --save writes fixed shards only: refused, pointing at trainer 0.
	if r := psgraph(t, "run", "--role", "pserver", "--index", "0", "--plan", plan, "--listen", freeAddr(t), "--save", filepath.Join(dir, "ps.safetensors")); r.code != 2 || !strings.Contains(r.stderr, "shards only dynamic tables, whose rows trainer 0's --save pulls") {
		t.Errorf("pserver --save: exit %d, want 2 and the reason\n%s", r.code, r.stderr)
	}
	addrs := []string{freeAddr(t), freeAddr(t)}
	env := []string{"PSGRAPH_TOKEN=test-token"}
	hand := filepath.Join(dir, "hand.safetensors")
	var ps []*proc
	for i, a := range addrs {
		ps = append(ps, start(t, fmt.Sprintf("pserver-%d", i), env, "run", "--role", "pserver", "--index", fmt.Sprint(i), "--plan", plan, "--listen", a))
	}
	t0 := start(t, "trainer-0", env, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pserver-endpoints", strings.Join(addrs, ","), "--steps", steps, "--save", hand)
	t1 := start(t, "trainer-1", env, "run", "--role", "trainer", "--index", "1", "--plan", plan, "--pserver-endpoints", strings.Join(addrs, ","), "--steps", steps)
	live := 0
	for _, p := range append([]*proc{t0, t1}, ps...) {
		r := p.wait(t, 3*time.Minute)
		if r.code != 0 {
			t.Fatalf("%s exit %d\n%s", p.name, r.code, r.stderr)
		}
		if strings.HasPrefix(p.name, "pserver") {
			s := summary(t, r)
			tables, _ := s["tables"].(map[string]any)
			emb, _ := tables["emb"].(map[string]any)
			n, _ := emb["live_rows"].(float64)
			if n <= 0 {
				t.Errorf("%s's summary holds no live rows of emb: %v", p.name, s)
			}
			live += int(n)
		}
	}
	a, err := os.ReadFile(hand)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "sync.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("the hand-run job saved %d bytes, train %d; want the same file", len(a), len(b))
	}
	ts, _, err := modelfile.LoadSafetensors(hand)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(ts["emb.keys"].L); n != live {
		t.Errorf("the file holds %d keys, the pservers' summaries count %d live rows", n, live)
	}
}

// A pserver holding a shard of a dynamic table (and dense parameters),
// SIGKILLed mid-run and restarted with the same command line, resumes
// from its checkpoint as with a fixed table: the checkpoint directory
// holds its shard's snapshot-and-deltas chain beside its manifest, the
// trainers wait for it, tell it where they are and re-send what it lost;
// every node exits 0, trainer 0 saves the whole table, and the trainers
// end with the loss of an undisturbed run. Behind -long: by default
// TestPServerRestartDynamicInmem (exec/job) restarts a dynamic shard's
// pserver from its chain in process (bitwise when staged, the
// undisturbed loss when not), and TestKilledPserverRestartsFromCheckpoint
// and TestKilledTablePserverRestartsFromCheckpoint SIGKILL and restart
// real pservers; -long adds the two together, a dynamic shard's real
// pserver killed.
func TestKilledDynamicPserverRestartsFromCheckpoint(t *testing.T) {
	testfix.Long(t)
	t.Parallel()
	file, _ := ctrDynamicExample(t)
	dir := filepath.Dir(file)
	const steps = "600"
	plan, ck := filepath.Join(dir, "plan"), filepath.Join(dir, "ck")
	ok(t, psgraph(t, "split", file, "--trainers", "2", "--pservers", "2", "-o", plan))
	addrs := []string{freeAddr(t), freeAddr(t)}
	env := []string{"PSGRAPH_TOKEN=secret"}
	pserver := func(name string, i int) *proc {
		return start(t, name, env, "run", "--role", "pserver", "--index", fmt.Sprint(i), "--plan", plan, "--listen", addrs[i],
			"--checkpoint-dir", ck, "--checkpoint-every", "100", "--trainer-timeout", "30s", "--log-every", "1000")
	}
	ps0, ps1 := pserver("pserver-0", 0), pserver("pserver-1", 1)
	save := filepath.Join(dir, "killed.safetensors")
	var trainers []*proc
	for i := 0; i < 2; i++ {
		args := []string{"run", "--role", "trainer", "--index", fmt.Sprint(i), "--plan", plan,
			"--pservers", strings.Join(addrs, ","), "--steps", steps, "--batch", "32", "--log-every", "1000", "--connect-timeout", "30s"}
		if i == 0 {
			args = append(args, "--save", save)
		}
		trainers = append(trainers, start(t, fmt.Sprintf("trainer-%d", i), env, args...))
	}
	waitForLine(t, ps0, "checkpoint saved")
	ps0.cmd.Process.Kill()
	ps0.wait(t, 10*time.Second)
	ps0b := pserver("pserver-0 (restarted)", 0)
	all := append([]*proc{ps0, ps0b, ps1}, trainers...)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range all {
				t.Logf("%s stderr:\n%s", p.name, p.stderrText())
			}
		}
	})
	var loss []float64
	for _, p := range trainers {
		r := p.wait(t, 2*time.Minute)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", p.name, r.code, r.stderr)
		}
		l, _ := summary(t, r)["loss"].(float64)
		loss = append(loss, l)
	}
	for _, p := range []*proc{ps0b, ps1} {
		if r := p.wait(t, 30*time.Second); r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", p.name, r.code, r.stderr)
		}
	}
	if !strings.Contains(ps0b.stderrText(), "resumed from checkpoint") {
		t.Fatalf("the restarted pserver did not restore a checkpoint:\n%s", ps0b.stderrText())
	}
	chain, err := filepath.Glob(filepath.Join(ck, "pserver-0.emb.s0.step-*.safetensors"))
	if err != nil || len(chain) == 0 {
		t.Errorf("no chain files of pserver-0's shard in %s (%v)", ck, err)
	}
	for _, p := range trainers {
		if !strings.Contains(p.stderrText(), "the restarted pserver resumes") {
			t.Errorf("%s did not report the pserver restart:\n%s", p.name, p.stderrText())
		}
	}
	if ts, _, err := modelfile.LoadSafetensors(save); err != nil || ts["emb.keys"] == nil || len(ts["emb.keys"].L) == 0 {
		t.Errorf("trainer 0 saved no dynamic table after the restart: %v", err)
	}
	r := psgraph(t, "train", file, "--trainers", "2", "--pservers", "2", "--steps", steps, "--batch", "32", "--log-every", steps)
	if r.code != 0 {
		t.Fatalf("undisturbed run: exit %d\n%s", r.code, r.stderr)
	}
	want, _ := summary(t, r)["loss"].(float64)
	t.Logf("loss over the last steps after the pserver restart %v, undisturbed %v", loss, want)
	for i, l := range loss {
		if l > 1.1*want || want == 0 {
			t.Errorf("trainer-%d: loss %v after a pserver restart, want within 10%% of the undisturbed %v", i, l, want)
		}
	}
}
