package cmd_test

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A float target (label dtype: float32, columns named by a header line)
// trains the same in a 2x2 sync job as locally with the combined batch.
func TestFloatTargetTrain2x2EqualsLocal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	model := filepath.Join("testdata", "regression", "linear.yaml")
	local := filepath.Join(dir, "local.safetensors")
	if r := psgraph(t, "run", "--role", "local", model, "--steps", "40", "--batch", "120", "--save", local); r.code != 0 {
		t.Fatalf("local run: exit %d\n%s", r.code, r.stderr)
	}
	dist := filepath.Join(dir, "dist.safetensors")
	r := psgraph(t, "train", model, "--trainers", "2", "--pservers", "2", "--steps", "40", "--batch", "60", "--save", dist)
	if r.code != 0 {
		t.Fatalf("train: exit %d\n%s", r.code, r.stderr)
	}
	if loss, _ := summary(t, r)["loss"].(float64); loss <= 0 || loss > 0.5 {
		t.Errorf("2x2 summary loss %v, want a fitted regression's (< 0.5)", loss)
	}
	equalToLocal(t, local, dist, "2x2 sync")
}

// train.epochs counts the rows of all trainers: 3 epochs of 240 rows at 2
// trainers x 60 is ceil(720 / 120) = 6 steps, as one node with batch 120
// trains, to the same parameters.
func TestEpochsTrain2x2EqualsLocal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src, err := os.ReadFile("../testdata/regression/linear.yaml")
	if err != nil {
		t.Fatal(err)
	}
	csv, err := os.ReadFile("../testdata/regression/linear.csv")
	if err != nil {
		t.Fatal(err)
	}
	m := strings.Replace(strings.Replace(string(src), "  steps: 300\n", "  epochs: 3\n", 1), "  batch: 240\n", "  batch: 60\n", 1)
	model := filepath.Join(dir, "linear.yaml")
	if err := os.WriteFile(model, []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "linear.csv"), csv, 0o644); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(dir, "local.safetensors")
	r := psgraph(t, "run", "--role", "local", model, "--batch", "120", "--save", local)
	if r.code != 0 {
		t.Fatalf("local run: exit %d\n%s", r.code, r.stderr)
	}
	if s := summary(t, r); s["steps"] != 6.0 {
		t.Errorf("local run of 3 epochs at batch 120: %v steps, want 6", s["steps"])
	}
	dist := filepath.Join(dir, "dist.safetensors")
	r = psgraph(t, "train", model, "--trainers", "2", "--pservers", "2", "--save", dist)
	if r.code != 0 {
		t.Fatalf("train: exit %d\n%s", r.code, r.stderr)
	}
	if s := summary(t, r); s["steps"] != 6.0 {
		t.Errorf("2x2 job of 3 epochs at batch 60: %v steps, want 6", s["steps"])
	}
	equalToLocal(t, local, dist, "2x2 sync with epochs")
}

// A regression whose output variable is named pred (as docs/dsl.md's
// float-target example names it) predicts it, by default and with
// --outputs pred: the column holds x·W + b of the saved parameters,
// computed here from the safetensors file and the CSV.
func TestRegressionPredictsItsOutputNamedPred(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	params := filepath.Join(dir, "linear.safetensors")
	if r := psgraph(t, "run", "--role", "local", "testdata/regression/linear.yaml", "--save", params); r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	p := readTensors(t, params)
	src, err := os.ReadFile("../testdata/regression/linear.csv")
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(string(src)), "\n")[1:]
	for _, args := range [][]string{nil, {"--outputs", "pred"}} {
		out := filepath.Join(dir, "pred.csv")
		r := psgraph(t, append([]string{"predict", "testdata/regression/linear.yaml", "--init-from", params, "--data", "testdata/regression/linear.csv", "-o", out}, args...)...)
		if r.code != 0 {
			t.Fatalf("predict %v: exit %d\n%s", args, r.code, r.stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if lines[0] != "pred" || len(lines) != len(rows)+1 {
			t.Fatalf("predict %v: header %q and %d rows, want pred and %d", args, lines[0], len(lines)-1, len(rows))
		}
		for i, row := range rows {
			f := strings.Split(row, ",")
			want := float64(p["b"][0])
			for j := range 3 {
				x, _ := strconv.ParseFloat(f[j], 64)
				want += x * float64(p["W"][j])
			}
			got, _ := strconv.ParseFloat(lines[i+1], 64)
			if math.Abs(got-want) > 1e-5*math.Max(1, math.Abs(want)) {
				t.Fatalf("predict %v row %d: %v, want x·W + b = %v", args, i, got, want)
			}
		}
	}
}
