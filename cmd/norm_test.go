package cmd_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// batch_norm's running statistics are state that training updates, --save
// and checkpoints keep, and eval and predict use: testdata/norm's
// references are torch's nn.BatchNorm1d (gen_reference.py).

// trainBNMLP trains testdata/norm/bn-mlp.yaml locally from the shared
// initial parameters and returns the saved file and the run.
func trainBNMLP(t *testing.T, args ...string) (string, result) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bn.safetensors")
	r := psgraph(t, append([]string{"run", "--role", "local", "testdata/norm/bn-mlp.yaml",
		"--init-from", "testdata/norm/init.safetensors", "--save", out}, args...)...)
	ok(t, r)
	return out, r
}

// 30 steps of bn-mlp.yaml give torch's parameters and running statistics
// (model.train(): batch statistics in the forward pass, the running mean
// and unbiased variance moved by momentum 0.1), and the run's summary
// loss, evaluated with the running statistics, is torch's model.eval()
// loss over the data set.
func TestBatchNormMatchesTorch(t *testing.T) {
	t.Parallel()
	saved, run := trainBNMLP(t)
	sum := summary(t, run)
	got, want := readTensors(t, saved), readTensors(t, "../testdata/norm/bn-mlp.safetensors")
	init := readTensors(t, "../testdata/norm/init.safetensors")
	init["bn_mean"], init["bn_var"] = make([]float32, 8), []float32{1, 1, 1, 1, 1, 1, 1, 1}
	if len(want) != 7 {
		t.Fatalf("the reference holds %d tensors, want 7", len(want))
	}
	for name, w := range want {
		if d := rel(got[name], w); d > 1e-4 {
			t.Errorf("%s: relative difference %.2g to torch, want <= 1e-4\n got %v\nwant %v", name, d, got[name], w)
		}
		if rel(init[name], w) < 1e-2 {
			t.Errorf("%s: torch's value barely moved from the initial one; the test would not discriminate", name)
		}
	}
	ref := readTensors(t, "../testdata/norm/bn-mlp-eval.safetensors")
	if loss, _ := sum["loss"].(float64); math.Abs(loss-float64(ref["loss"][0])) > 1e-4 {
		t.Errorf("the summary's loss %v, torch's model.eval() loss %v", sum["loss"], ref["loss"][0])
	}
	ev := psgraph(t, "eval", "testdata/norm/bn-mlp.yaml", "--init-from", saved)
	ok(t, ev)
	if e := summary(t, ev); e["loss"] != sum["loss"] {
		t.Errorf("psgraph eval loss %v, the run's summary %v", e["loss"], sum["loss"])
	}
}

// predict normalizes with the saved running statistics, not the rows it
// is given: a row scores the same alone as in a 3-row file, and both are
// torch's model.eval() probabilities.
func TestBatchNormPredictUsesRunningStatistics(t *testing.T) {
	t.Parallel()
	saved, _ := trainBNMLP(t)
	raw, err := os.ReadFile("../testdata/norm/bn.csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(raw), "\n")
	dir := t.TempDir()
	predict := func(rows int) []float64 {
		in := filepath.Join(dir, "rows.csv")
		if err := os.WriteFile(in, []byte(strings.Join(lines[:rows], "")), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "pred.csv")
		ok(t, psgraph(t, "predict", "testdata/norm/bn-mlp.yaml", "--init-from", saved, "--data", in, "-o", out))
		head, got := readPredictions(t, out)
		if len(head) != 1 || head[0] != "prob" || len(got) != rows {
			t.Fatalf("predict wrote %v and %d rows, want prob and %d", head, len(got), rows)
		}
		probs := make([]float64, rows)
		for i, r := range got {
			probs[i] = r[0]
		}
		return probs
	}
	alone, three := predict(1), predict(3)
	if alone[0] != three[0] {
		t.Errorf("row 0 scores %v alone and %v among 3 rows", alone[0], three[0])
	}
	want := readTensors(t, "../testdata/norm/bn-mlp-eval.safetensors")["prob"]
	for i, p := range three {
		if math.Abs(p-float64(want[i])) > 1e-4 {
			t.Errorf("row %d: predict %v, torch's model.eval() %v", i, p, want[i])
		}
	}
	if math.Abs(three[0]-three[1]) < 1e-3 {
		t.Fatalf("rows 0 and 1 score alike (%v, %v); the test would not discriminate", three[0], three[1])
	}
}

// A local run resumed from its checkpoint restores the running statistics
// with the parameters: it saves what the run without a break saves.
func TestBatchNormStatisticsInCheckpoints(t *testing.T) {
	t.Parallel()
	straight, _ := trainBNMLP(t, "--steps", "24")
	ck := t.TempDir()
	trainBNMLP(t, "--steps", "12", "--checkpoint-dir", ck, "--checkpoint-every", "6")
	resumed, r := trainBNMLP(t, "--steps", "24", "--checkpoint-dir", ck, "--checkpoint-every", "6")
	if !strings.Contains(r.stderr, "resumed from checkpoint") || !strings.Contains(r.stderr, "12") {
		t.Fatalf("the second run did not resume at step 12:\n%s", r.stderr)
	}
	a, b := readTensors(t, straight), readTensors(t, resumed)
	for _, name := range []string{"bn_mean", "bn_var", "W1", "gamma"} {
		if d := rel(b[name], a[name]); d != 0 {
			t.Errorf("%s: the resumed run differs from the straight one by %.2g", name, d)
		}
	}
}

// In a 2x2 job each trainer keeps its own running statistics, from its
// own rows (as torch's DistributedDataParallel with its default
// broadcast_buffers, where rank 0's buffers are the job's), and trainer
// 0's are saved: bn-input.yaml normalizes the features themselves, so
// they are torch's over the rows trainer 0 read.
func TestBatchNormTrain2x2SavesTrainer0Statistics(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "job.safetensors")
	ok(t, psgraph(t, "train", "testdata/norm/bn-input.yaml", "--trainers", "2", "--pservers", "2", "--save", out))
	got := readTensors(t, out)
	t0 := readTensors(t, "../testdata/norm/bn-input-trainer0.safetensors")
	t1 := readTensors(t, "../testdata/norm/bn-input-trainer1.safetensors")
	for _, name := range []string{"bn_mean", "bn_var"} {
		if d := rel(got[name], t0[name]); d > 1e-5 {
			t.Errorf("%s: relative difference %.2g to trainer 0's statistics by torch\n got %v\nwant %v", name, d, got[name], t0[name])
		}
		if rel(t0[name], t1[name]) < 1e-2 {
			t.Errorf("%s: trainers 0 and 1 have alike statistics; the test would not discriminate", name)
		}
	}
	for _, name := range []string{"gamma", "beta", "W", "b"} {
		if len(got[name]) == 0 {
			t.Errorf("the job's file lacks parameter %s", name)
		}
	}
}

// editedBNMLP writes testdata/norm/bn-mlp.yaml with each (old, new) pair
// of edits applied, and its data beside it, into dir; it fails the test
// when an edit no longer applies.
func editedBNMLP(t *testing.T, dir string, edits ...string) string {
	t.Helper()
	src, err := os.ReadFile("../testdata/norm/bn-mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	csv, err := os.ReadFile("../testdata/norm/bn.csv")
	if err != nil {
		t.Fatal(err)
	}
	m := string(src)
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(m, edits[i]) {
			t.Fatalf("bn-mlp.yaml has no %q any more; this test's edits no longer apply", edits[i])
		}
		m = strings.Replace(m, edits[i], edits[i+1], 1)
	}
	model := filepath.Join(dir, "bn-mlp.yaml")
	for name, b := range map[string][]byte{model: []byte(m), filepath.Join(dir, "bn.csv"): csv} {
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return model
}

// The held-out evaluation during a run (data.eval) uses the running
// statistics of the training program: the run's eval_loss is what psgraph
// eval computes from the saved file.
func TestBatchNormHeldOutUsesRunningStatistics(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	model := editedBNMLP(t, dir,
		"  label: {name: y, column: 4, dtype: float32}\n", "  label: {name: y, column: 4, dtype: float32}\n  eval: {fraction: 0.25}\n",
		"  steps: 30\n", "  steps: 30\n  eval_every: 10\n")
	saved := filepath.Join(dir, "bn.safetensors")
	r := psgraph(t, "run", "--role", "local", model, "--save", saved)
	ok(t, r)
	s := summary(t, r)
	ev := psgraph(t, "eval", model, "--init-from", saved)
	ok(t, ev)
	e := summary(t, ev)
	if e["data"] != "held-out" || e["rows"] != 16.0 || s["eval_rows"] != 16.0 {
		t.Fatalf("eval %v, run %v: want the 16 held-out rows", e, s)
	}
	if l, _ := s["eval_loss"].(float64); l == 0 || math.Abs(l-e["loss"].(float64)) > 1e-6 {
		t.Errorf("the run's eval_loss %v, psgraph eval of the saved file %v", s["eval_loss"], e["loss"])
	}
}

// A 2x2 job rerun from its checkpoints resumes the trainers' running
// statistics with the pservers' parameters: each trainer checkpoints its
// own (node trainer-<i>) at the pservers' steps and restores them at the
// step the job resumes from, so the resumed job saves what the job without
// a break saves, statistics and parameters alike. (bn-mlp.yaml: the
// statistics depend on the parameters, so both must be resumed.)
func TestBatchNormTrain2x2ResumesStatisticsFromCheckpoints(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	job := func(steps string, args ...string) (string, result) {
		out := filepath.Join(t.TempDir(), "job.safetensors")
		r := psgraph(t, append([]string{"train", "testdata/norm/bn-mlp.yaml", "--trainers", "2", "--pservers", "2",
			"--steps", steps, "--save", out}, args...)...)
		ok(t, r)
		return out, r
	}
	ck := []string{"--checkpoint-dir", filepath.Join(dir, "ck"), "--checkpoint-every", "6"}
	straight, _ := job("24")
	job("12", ck...)
	for i := range 2 {
		if _, err := os.Stat(filepath.Join(dir, "ck", fmt.Sprintf("trainer-%d.step-12.safetensors", i))); err != nil {
			t.Fatalf("trainer-%d wrote no checkpoint of step 12: %v", i, err)
		}
	}
	resumed, r := job("24", ck...)
	if !strings.Contains(r.stderr, "resuming from the checkpoints of step 12") || !strings.Contains(r.stderr, "restored this trainer's own state") {
		t.Fatalf("the rerun did not resume the trainers' state at step 12:\n%s", r.stderr)
	}
	a, b := readTensors(t, straight), readTensors(t, resumed)
	for _, name := range []string{"bn_mean", "bn_var", "W1", "gamma", "W2"} {
		if len(a[name]) == 0 || rel(b[name], a[name]) != 0 {
			t.Errorf("%s: the resumed job saved %v, the job without a break %v", name, b[name], a[name])
		}
	}
	// Without the trainers' checkpoints the statistics restart from their
	// initial values: the resumed job would differ.
	for i := range 2 {
		if err := os.Remove(filepath.Join(dir, "ck", fmt.Sprintf("trainer-%d.json", i))); err != nil {
			t.Fatal(err)
		}
	}
	fresh, r := job("24", ck...)
	if !strings.Contains(r.stderr, "starts from its initial values") {
		t.Errorf("without its checkpoints a trainer did not say its state starts over:\n%s", r.stderr)
	}
	if c := readTensors(t, fresh); rel(c["bn_mean"], a["bn_mean"]) == 0 {
		t.Errorf("bn_mean is the same without the trainers' checkpoints; the test would not discriminate")
	}
}

// What a trainer holds beyond the model's own state is checkpointed with
// it: a parameter placed on the trainer (a 1x1 job's W2) and its
// optimizer's state resume bitwise too. And an async job of two trainers,
// whose pservers count both trainers' steps, is rerun from its checkpoints
// (each trainer restores its newest checkpoint before the pservers' step).
func TestTrainerCheckpointsWhatItHolds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	model := editedBNMLP(t, dir,
		"W2: {shape: [8, 1], init: {type: he_normal, seed: 2}}", "W2: {shape: [8, 1], init: {type: he_normal, seed: 2}, place: trainer}",
		"optimizer: {type: sgd, lr: 0.1}", "optimizer: {type: momentum, lr: 0.1, momentum: 0.9}")
	job := func(model, steps string, args ...string) (string, result) {
		out := filepath.Join(t.TempDir(), "job.safetensors")
		r := psgraph(t, append([]string{"train", model, "--steps", steps, "--save", out}, args...)...)
		ok(t, r)
		return out, r
	}
	one := []string{"--trainers", "1", "--pservers", "1", "--checkpoint-every", "6"}
	straight, _ := job(model, "24", "--trainers", "1", "--pservers", "1")
	ck := filepath.Join(dir, "ck")
	job(model, "12", append(one, "--checkpoint-dir", ck)...)
	resumed, r := job(model, "24", append(one, "--checkpoint-dir", ck)...)
	if !strings.Contains(r.stderr, "resuming from the checkpoints of step 12") {
		t.Fatalf("the rerun did not resume at step 12:\n%s", r.stderr)
	}
	a, b := readTensors(t, straight), readTensors(t, resumed)
	for _, name := range []string{"W2", "bn_mean", "W1"} {
		if len(a[name]) == 0 || rel(b[name], a[name]) != 0 {
			t.Errorf("%s: the resumed job saved %v, the job without a break %v", name, b[name], a[name])
		}
	}

	async := []string{"--trainers", "2", "--pservers", "2", "--mode", "async", "--checkpoint-every", "6", "--checkpoint-dir", filepath.Join(dir, "ck-async")}
	job("testdata/norm/bn-mlp.yaml", "12", async...)
	_, r = job("testdata/norm/bn-mlp.yaml", "24", async...)
	if !strings.Contains(r.stderr, "resuming from the checkpoints of step") || !strings.Contains(r.stderr, "restored this trainer's own state") {
		t.Errorf("the async rerun did not resume the pservers and the trainers' state:\n%s", r.stderr)
	}
}

// A 2x2 job started --init-from a saved model takes the running statistics
// from it (the trainers read the model's own state, the pservers the
// parameters). bn-input.yaml normalizes the features themselves, so a
// trainer's batch statistics do not depend on the parameters, and N steps
// from statistics s0 end at the run's from the initial ones plus
// (1 - momentum)^N (s0 - initial): job B, started from job A's saved file
// with A's rows, ends at A + 0.8^N (A - initial).
func TestBatchNormTrain2x2ReadsStatisticsFromInitFrom(t *testing.T) {
	t.Parallel()
	const steps = 5
	job := func(args ...string) string {
		out := filepath.Join(t.TempDir(), "job.safetensors")
		ok(t, psgraph(t, append([]string{"train", "testdata/norm/bn-input.yaml", "--trainers", "2", "--pservers", "2",
			"--steps", fmt.Sprint(steps), "--save", out}, args...)...))
		return out
	}
	from := job()
	a, b := readTensors(t, from), readTensors(t, job("--init-from", from))
	decay := math.Pow(0.8, steps)
	for _, c := range []struct {
		name string
		init float64
	}{{"bn_mean", 0}, {"bn_var", 1}} {
		want := make([]float32, len(a[c.name]))
		for j, v := range a[c.name] {
			want[j] = float32(float64(v) + decay*(float64(v)-c.init))
		}
		if d := rel(b[c.name], want); len(want) == 0 || d > 1e-5 {
			t.Errorf("%s: relative difference %.2g\n got %v\nwant %v (from %v)", c.name, d, b[c.name], want, a[c.name])
		}
		if rel(a[c.name], want) < 1e-2 {
			t.Errorf("%s: the expected statistics are those of a fresh start; the test would not discriminate", c.name)
		}
	}
}
