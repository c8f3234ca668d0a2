package partition

import (
	"os"
	"strconv"
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

// TestSplitClipNormExchange: with train.clip.norm each pserver adds up
// its blocks' sums of squares and sends them to the trainers
// (clip@part.<j>), and accumulates the factor every trainer sends back
// (clip@factor.<j>), between its gradients' accumulates and its updates
// in file order; each trainer receives every pserver's part. The plan
// lists the exchange's transfers, one send and one receiver each
// (checkTransfers).
func TestSplitClipNormExchange(t *testing.T) {
	g, _ := loadModel(t, "../testdata/optim/mlp-adam-clip-norm.yaml")
	p, err := Split(g, Options{Trainers: 2, PServers: 3, MinBlockSize: 20})
	if err != nil {
		t.Fatal(err)
	}
	checkTransfers(t, p)
	recvs := 0
	for _, op := range p.Trainer.Ops {
		if op.Type == "recv" && strings.HasPrefix(op.Attrs.String("var"), "clip@part.") {
			recvs++
		}
	}
	if recvs != 3 {
		t.Errorf("the trainer receives %d partial norms, want one per pserver (3)", recvs)
	}
	for j, ps := range p.PServers {
		phase := 0 // 0: gradients and their sums of squares, 1: exchange, 2: updates
		for _, op := range ps.Ops {
			switch {
			case op.Type == "accumulate" && op.Attrs.String("var") == "clip@factor."+strconv.Itoa(j):
				if phase != 1 || op.Attrs.Int("count") != 2 {
					t.Errorf("pserver %d: the factor's accumulate (count %d) is not right after the send of its part", j, op.Attrs.Int("count"))
				}
				phase = 2
			case op.Type == "send" && op.Attrs.String("var") == "clip@part."+strconv.Itoa(j):
				phase = 1
			case op.Type == "accumulate" || op.Type == "sum_squares":
				if phase != 0 {
					t.Errorf("pserver %d: %s %v after the exchange", j, op.Type, op.Outputs)
				}
			}
		}
		if phase != 2 {
			t.Errorf("pserver %d has no clip-norm exchange", j)
		}
	}
}

// TestSplitRefusesClipNorm: clipping by the global norm is refused, with
// the reason, at train.clip's position, in an async job and with a
// parameter placed on the trainer.
func TestSplitRefusesClipNorm(t *testing.T) {
	g, _ := loadModel(t, "../testdata/optim/mlp-adam-clip-norm.yaml")
	_, err := Split(g, Options{Trainers: 2, PServers: 2, Mode: Async})
	if err == nil {
		t.Fatal("async split of a model with train.clip.norm succeeded")
	}
	for _, want := range []string{"mlp-adam-clip-norm.yaml:24:", "train.clip.norm needs a sync job", "clip by value"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	src, err := os.ReadFile("../testdata/optim/mlp-adam-clip-norm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src = []byte(strings.Replace(string(src), "b2: {shape: [3]}", "b2: {shape: [3], place: trainer}", 1))
	g, err = dsl.LoadBytes("../testdata/optim/m.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Split(g, Options{Trainers: 1, PServers: 2})
	if err == nil || !strings.Contains(err.Error(), "b2 is placed on the trainer") {
		t.Errorf("split with b2 on the trainer: error %v, want one naming b2's placement", err)
	}
}
