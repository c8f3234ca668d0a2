package job

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/trainer"
)

// Adam's bias corrections are kept as 1 - b^t itself (adam.yaml's bias1
// and bias2), advanced by the same recurrence as the moments: under a
// constant gradient g, m / (1 - b1^t) is exactly g and v / (1 - b2^t)
// exactly g² in float32, so each step moves the parameter by exactly
// lr * g / (|g| + eps) and after t steps of lr 1 it is -t (to the last
// bit). Kept as stored powers b^t, 1 - b2^t loses five digits at t = 1:
// the parameter is off by ~6.5e-6 relative after the first step, which
// made DCN-v2 with adam drift 4e-3 from PyTorch (bench/history-2026-12.md).
func TestAdamBiasCorrectionsExact(t *testing.T) {
	for _, opt := range []string{"adam", "adamw"} {
		t.Run(opt, func(t *testing.T) {
			dir := t.TempDir()
			var rows strings.Builder
			for range 16 {
				rows.WriteString("1\n")
			}
			if err := os.WriteFile(filepath.Join(dir, "ones.csv"), []byte(rows.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "m.yaml")
			src := fmt.Sprintf(`psgraph: 1
data:
  csv: ones.csv
  features: {name: x, columns: [0, 1]}
params:
  w: {shape: [1]}
ops:
  - {type: mul, inputs: [x, w], outputs: [xw]}
  - {type: mean, inputs: [xw], outputs: [loss]}
train: {loss: loss, batch: 4, steps: 1, optimizer: {type: %s, lr: 1, weight_decay: 0}}
`, opt)
			if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			g := load(t, path)
			for _, steps := range []int{1, 2, 10} {
				save := filepath.Join(dir, fmt.Sprintf("w%d.safetensors", steps))
				if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: steps, Save: save, Log: zerolog.Nop()}); err != nil {
					t.Fatal(err)
				}
				ts, _, err := modelfile.LoadSafetensors(save)
				if err != nil {
					t.Fatal(err)
				}
				// the gradient of mean(x w) is mean(x) = 1
				want := -float64(steps) / (1 + 1e-8)
				if got := float64(ts["w"].F[0]); math.Abs(got-want) > 1e-7*math.Abs(want) {
					t.Errorf("after %d steps of %s with lr 1 under gradient 1, w = %.9g, want %.9g", steps, opt, got, want)
				}
			}
		})
	}
}
