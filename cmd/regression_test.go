package cmd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A float target (label dtype: float32, columns named by a header line)
// trains the same in a 2x2 sync job as locally with the combined batch.
func TestFloatTargetTrain2x2EqualsLocal(t *testing.T) {
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
