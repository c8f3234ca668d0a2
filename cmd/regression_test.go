package cmd_test

import (
	"path/filepath"
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
