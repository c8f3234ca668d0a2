package partition

import (
	"os"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
)

// TestSplitPlacesScheduleWithOptimizer: with lr: {schedule: ...} and
// train.clip.value, the step op, the schedule's ops and the clip run on
// the pservers beside each block's update (one step op per block), and
// the trainer has none of them.
func TestSplitPlacesScheduleWithOptimizer(t *testing.T) {
	src, err := os.ReadFile("../testdata/optim/mlp-adam-warmup-cosine.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src = []byte(strings.Replace(string(src), "  optimizer:", "  clip: {value: 1}\n  optimizer:", 1))
	g2, err := dsl.LoadBytes("../testdata/optim/m.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Split(g2, Options{Trainers: 2, PServers: 3, MinBlockSize: 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range p.Trainer.Ops {
		if op.Type == "step" || op.Type == "cos" || op.Type == "clip" {
			t.Errorf("trainer runs %s (%v -> %v); it belongs on the pserver of its parameter", op.Type, op.Inputs, op.Outputs)
		}
	}
	blocks, steps, clips := 0, 0, 0
	for _, ps := range p.PServers {
		for _, op := range ps.Ops {
			switch op.Type {
			case "accumulate":
				blocks++
			case "step":
				steps++
			case "clip":
				if op.Attrs.Float("max") == 1 && op.Attrs.Float("min") == -1 {
					clips++
				}
			}
		}
	}
	if blocks < 5 || steps != blocks || clips != blocks {
		t.Errorf("%d blocks on the pservers, %d step ops and %d value clips; want one of each per block (and more blocks than parameters)", blocks, steps, clips)
	}
}

// TestSplitRefusesClipNorm: clipping by the global norm is not split yet;
// split says so and why, at train.clip's position.
func TestSplitRefusesClipNorm(t *testing.T) {
	g, _ := loadModel(t, "../testdata/optim/mlp-adam-clip-norm.yaml")
	_, err := Split(g, Options{Trainers: 2, PServers: 2})
	if err == nil {
		t.Fatal("split of a model with train.clip.norm succeeded")
	}
	for _, want := range []string{"mlp-adam-clip-norm.yaml:24:", "train.clip.norm cannot be split yet", "different pservers", "clip by value"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
