package cmd_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/internal/testfix"

	"github.com/psgraph/psgraph/exec/data"
)

// readPredictions reads predict's CSV: its header and rows of numbers.
func readPredictions(t *testing.T, path string) ([]string, [][]float64) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	var rows [][]float64
	for _, l := range lines[1:] {
		var row []float64
		for _, f := range strings.Split(l, ",") {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatalf("%s: %q is not a number", path, f)
			}
			row = append(row, v)
		}
		rows = append(rows, row)
	}
	return strings.Split(lines[0], ","), rows
}

func ok(t *testing.T, r result) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// accuracyOf is the share of rows keep selects whose pred column (0)
// equals the label, computed from predict's output.
func accuracyOf(rows [][]float64, ys []int, keep func(int) bool) float64 {
	right, n := 0, 0
	for i, r := range rows {
		if keep(i) {
			n++
			if int(r[0]) == ys[i] {
				right++
			}
		}
	}
	return float64(right) / float64(n)
}

// psgraph eval of a trained digits model reports the accuracy computed by
// hand from psgraph predict's pred column and the CSV's labels, and the
// loss and accuracy the run's summary reported.
func TestEvalEqualsAccuracyFromPredict(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	model := filepath.Join(dir, "digits.safetensors")
	run := psgraph(t, "run", "--role", "local", "examples/digits-mlp.yaml", "--steps", "150", "--save", model)
	ok(t, run)
	ev := psgraph(t, "eval", "examples/digits-mlp.yaml", "--init-from", model)
	ok(t, ev)
	out := filepath.Join(dir, "pred.csv")
	pr := psgraph(t, "predict", "examples/digits-mlp.yaml", "--init-from", model, "--data", "examples/data/digits.csv", "-o", out)
	ok(t, pr)
	header, rows := readPredictions(t, out)
	_, ys := testfix.Digits(t)
	if len(rows) != len(ys) || header[0] != "pred" || len(header) != 11 || header[10] != "prob_9" {
		t.Fatalf("predict wrote %d rows with header %v for %d input rows; want pred, prob_0..prob_9", len(rows), header, len(ys))
	}
	got, s := summary(t, ev), summary(t, run)
	acc := accuracyOf(rows, ys, func(int) bool { return true })
	if math.Abs(got["acc"].(float64)-acc) > 1e-5 || got["rows"] != float64(len(ys)) {
		t.Fatalf("eval %v; accuracy from predict's output %v over %d rows", got, acc, len(ys))
	}
	if got["acc"] != s["acc"] || got["loss"] != s["loss"] {
		t.Fatalf("eval %v, the run's summary %v: same parameters and data, different numbers", got, s)
	}
	// New rows come without the label column: the same predictions.
	raw, err := os.ReadFile("../examples/data/digits.csv")
	if err != nil {
		t.Fatal(err)
	}
	var nolabel strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		nolabel.WriteString(l[:strings.LastIndexByte(l, ',')] + "\n")
	}
	unlabelled := filepath.Join(dir, "new.csv")
	if err := os.WriteFile(unlabelled, []byte(nolabel.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out2 := filepath.Join(dir, "pred2.csv")
	ok(t, psgraph(t, "predict", "examples/digits-mlp.yaml", "--init-from", model, "--data", unlabelled, "-o", out2))
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(out2)
	if !bytes.Equal(a, b) {
		t.Fatalf("predict of the rows without their label column wrote other predictions")
	}
}

// predict's probabilities are the softmax of the logits a forward pass in
// this test computes from the saved weights and the CSV, normalized with
// the mean and std of the rows; its logits are those logits.
func TestPredictProbabilitiesAreSoftmaxOfSavedWeights(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	model := filepath.Join(dir, "digits.safetensors")
	ok(t, psgraph(t, "run", "--role", "local", "examples/digits-mlp.yaml", "--steps", "100", "--save", model))
	out := filepath.Join(dir, "out.csv")
	ok(t, psgraph(t, "predict", "examples/digits-mlp.yaml", "--init-from", model, "--data", "examples/data/digits.csv", "-o", out, "--outputs", "logits,prob"))
	header, rows := readPredictions(t, out)
	if len(header) != 20 || header[0] != "logits_0" || header[10] != "prob_0" {
		t.Fatalf("header %v; want logits_0..logits_9, prob_0..prob_9", header)
	}
	p, _, err := modelfile.LoadSafetensors(model)
	if err != nil {
		t.Fatal(err)
	}
	xs, _ := testfix.Digits(t)
	mean, std := make([]float64, 64), make([]float64, 64)
	for _, x := range xs {
		for j, v := range x {
			mean[j] += v / float64(len(xs))
		}
	}
	for _, x := range xs {
		for j, v := range x {
			std[j] += (v - mean[j]) * (v - mean[j]) / float64(len(xs))
		}
	}
	for j := range std {
		if std[j] = math.Sqrt(std[j]); std[j] < 1e-12 {
			std[j] = 1
		}
	}
	W1, b1, W2, b2 := p["W1"].F, p["b1"].F, p["W2"].F, p["b2"].F
	worstZ, worstP := 0.0, 0.0
	for i, x := range xs {
		h := make([]float64, 128)
		for k := range h {
			h[k] = float64(b1[k])
			for j, v := range x {
				h[k] += (v - mean[j]) / std[j] * float64(W1[j*128+k])
			}
			h[k] = math.Max(h[k], 0)
		}
		z := make([]float64, 10)
		m := math.Inf(-1)
		for c := range z {
			z[c] = float64(b2[c])
			for k, hv := range h {
				z[c] += hv * float64(W2[k*10+c])
			}
			m = math.Max(m, z[c])
		}
		var s float64
		for _, v := range z {
			s += math.Exp(v - m)
		}
		for c, v := range z {
			worstZ = math.Max(worstZ, math.Abs(rows[i][c]-v)/math.Max(1, math.Abs(v)))
			worstP = math.Max(worstP, math.Abs(rows[i][10+c]-math.Exp(v-m)/s))
		}
	}
	if worstZ > 1e-4 || worstP > 1e-5 {
		t.Fatalf("largest difference to the forward pass by hand: logits %.2e (relative), probabilities %.2e", worstZ, worstP)
	}
}

// A 2x2 psgraph train job on the digits with a fifth held out: trainer
// 0's summary has the held-out loss and accuracy of the final parameters,
// the --metrics file has them at train.eval_every, psgraph eval of the
// saved file reports the same, and predict's pred column gives that
// accuracy over the held-out rows.
func TestEvalPredictAfterTrain2x2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	model := filepath.Join(dir, "digits.safetensors")
	metrics := filepath.Join(dir, "run.jsonl")
	tr := psgraph(t, "train", "testdata/eval/digits-heldout.yaml", "--trainers", "2", "--pservers", "2", "--steps", "200", "--save", model, "--metrics", metrics)
	ok(t, tr)
	s := summary(t, tr)
	ev := psgraph(t, "eval", "testdata/eval/digits-heldout.yaml", "--init-from", model)
	ok(t, ev)
	e := summary(t, ev)
	if e["data"] != "held-out" || e["rows"] != 359.0 || s["eval_rows"] != 359.0 || e["acc"] != s["eval_acc"] || e["loss"] != s["eval_loss"] {
		t.Fatalf("psgraph eval %v; trainer 0's summary %v", e, s)
	}
	raw, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	var evalSteps []float64
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["eval_acc"] != nil {
			evalSteps = append(evalSteps, m["step"].(float64))
		}
	}
	if len(evalSteps) != 2 || evalSteps[0] != 100 || evalSteps[1] != 200 {
		t.Fatalf("trainer 0's metrics have eval lines at steps %v, want [100 200]", evalSteps)
	}
	if raw, err := os.ReadFile(filepath.Join(dir, "run.trainer-1.jsonl")); err != nil || bytes.Contains(raw, []byte("eval_")) || !bytes.Contains(raw, []byte(`"loss"`)) {
		t.Fatalf("trainer 1's metrics file (%v) should have loss lines and no eval lines:\n%s", err, raw)
	}
	out := filepath.Join(dir, "pred.csv")
	ok(t, psgraph(t, "predict", "testdata/eval/digits-heldout.yaml", "--init-from", model, "--data", "examples/data/digits.csv", "-o", out))
	_, rows := readPredictions(t, out)
	_, ys := testfix.Digits(t)
	held, err := data.HeldOut(len(ys), 0.2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if acc := accuracyOf(rows, ys, func(i int) bool { return held[i] }); math.Abs(acc-e["acc"].(float64)) > 1e-5 {
		t.Fatalf("accuracy over the held-out rows from predict's output %v, eval says %v", acc, e["acc"])
	}
}

// In a 2x2 job with an embedding table trainer 0 evaluates the held-out
// rows, pulling the table rows they look up from the pservers: its
// summary's eval_* are what psgraph eval of the saved file (the whole
// model, its table pulled from the pservers) computes, and predict's pred
// column gives that accuracy.
func TestTableJobEvaluatesHeldOut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	model := filepath.Join(dir, "ids.safetensors")
	tr := psgraph(t, "train", "testdata/eval/ids-heldout.yaml", "--trainers", "2", "--pservers", "2", "--save", model)
	ok(t, tr)
	ev := psgraph(t, "eval", "testdata/eval/ids-heldout.yaml", "--init-from", model)
	ok(t, ev)
	e := summary(t, ev)
	if e["data"] != "held-out" || e["rows"] != 50.0 {
		t.Fatalf("eval %v: want the 50 held-out rows of 200", e)
	}
	if s := summary(t, tr); s["eval_rows"] != 50.0 || s["eval_loss"] != e["loss"] || s["eval_acc"] != e["acc"] {
		t.Errorf("trainer 0's summary %v: want eval_loss and eval_acc over the 50 held-out rows equal to eval's %v", s, e)
	}
	out := filepath.Join(dir, "pred.csv")
	ok(t, psgraph(t, "predict", "testdata/eval/ids-heldout.yaml", "--init-from", model, "--data", "testdata/sparse/ids.csv", "-o", out))
	_, rows := readPredictions(t, out)
	raw, err := os.ReadFile("../testdata/sparse/ids.csv")
	if err != nil {
		t.Fatal(err)
	}
	var ys []int
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		y, _ := strconv.Atoi(l[strings.LastIndexByte(l, ',')+1:])
		ys = append(ys, y)
	}
	held, _ := data.HeldOut(len(ys), 0.25, 1)
	if acc := accuracyOf(rows, ys, func(i int) bool { return held[i] }); math.Abs(acc-e["acc"].(float64)) > 1e-5 {
		t.Fatalf("held-out accuracy from predict's output %v, eval says %v", acc, e["acc"])
	}
}

// eval and predict refuse a missing flag as a usage error (exit 2), and
// bad input (an unknown output, a parameter file of another model) with
// exit 1 and a message that says what to do.
func TestEvalPredictRefuseBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	digits := filepath.Join(dir, "digits.safetensors")
	ok(t, psgraph(t, "run", "--role", "local", "examples/digits-mlp.yaml", "--steps", "5", "--save", digits))
	iris := filepath.Join(dir, "iris.safetensors")
	ok(t, psgraph(t, "run", "--role", "local", "examples/iris.yaml", "--steps", "5", "--save", iris))
	out := filepath.Join(dir, "out.csv")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"eval", "examples/digits-mlp.yaml"}, 2, "eval needs --init-from F.safetensors"},
		{[]string{"predict", "examples/digits-mlp.yaml", "--init-from", digits, "-o", out}, 2, "predict needs --data FILE"},
		{[]string{"predict", "examples/digits-mlp.yaml", "--init-from", digits, "--data", "examples/data/digits.csv"}, 2, "predict needs -o OUT.csv"},
		{[]string{"predict", "examples/digits-mlp.yaml", "--init-from", digits, "--data", "examples/data/digits.csv", "-o", out, "--outputs", "logit"}, 1, `no variable "logit" (pred and prob name a classifier's outputs) (did you mean "logits"?)`},
		{[]string{"predict", "examples/digits-mlp.yaml", "--init-from", digits, "--data", "examples/data/digits.csv", "-o", out, "--outputs", "acc"}, 1, `"acc" is [], not one row per input row`},
		{[]string{"eval", "examples/digits-mlp.yaml", "--init-from", iris}, 1, `in examples/digits-mlp.yaml; the file belongs to another model`},
		{[]string{"eval", "examples/digits-mlp.yaml", "--init-from", digits, "--data", "examples/data/iris.csv"}, 1, "examples/data/iris.csv:1: the model reads column 64 but rows have 5 columns"},
	}
	for _, c := range cases {
		r := psgraph(t, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("psgraph %v: exit %d, stderr %q; want exit %d and %q", c.args, r.code, r.stderr, c.code, c.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a refused predict wrote %s", out)
	}
}

// check counts the training and held-out rows: 1797 digits, round(0.2 x
// 1797) = 359 held out.
func TestCheckCountsHeldOutRows(t *testing.T) {
	t.Parallel()
	r := psgraph(t, "check", "testdata/eval/digits-heldout.yaml")
	ok(t, r)
	if !strings.Contains(r.stdout, "data (1438 rows, 359 held out):") {
		t.Fatalf("check output:\n%s", r.stdout)
	}
}
