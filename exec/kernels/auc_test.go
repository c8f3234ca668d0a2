package kernels_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/exec/trainer"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
)

// aucModel computes the auc of state variables s (scores of shape) and y.
func aucModel(shape string, rows int) string {
	return fmt.Sprintf(`psgraph: 1
state:
  s: {shape: %s}
  y: {shape: [%d], dtype: int32}
ops:
  - {type: auc, inputs: [s, y], outputs: [a]}
`, shape, rows)
}

// pairwiseAUC is the definition, O(n²): over every (positive, negative)
// pair, 1 when the positive scores higher, 1/2 for a tie.
func pairwiseAUC(score []float64, label []int32) float64 {
	var wins float64
	var pairs int
	for i := range score {
		for j := range score {
			if label[i] != 1 || label[j] != 0 {
				continue
			}
			pairs++
			switch {
			case score[i] > score[j]:
				wins++
			case score[i] == score[j]:
				wins += 0.5
			}
		}
	}
	if pairs == 0 {
		return math.NaN()
	}
	return wins / float64(pairs)
}

// The kernel agrees with the pairwise definition on random batches with
// many ties, for each accepted scores shape; [B, 2] scores rank by
// column 1 minus column 0. A step allocates nothing.
func TestAUCMatchesPairwiseDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, rows := range []int{1, 2, 3, 17, 64, 257} {
		for _, cols := range []int{0, 1, 2} { // 0: scores [B]
			shape := fmt.Sprintf("[%d]", rows)
			if cols > 0 {
				shape = fmt.Sprintf("[%d, %d]", rows, cols)
			}
			p := compileModel(t, aucModel(shape, rows), 1)
			s, y := p.Scope["s"].F, p.Scope["y"].I
			for trial := 0; trial < 20; trial++ {
				score := make([]float64, rows)
				for r := range rows {
					y[r] = int32(rng.IntN(2))
					if trial%5 == 0 {
						y[r] = 1 // one class only, now and then
					}
					v := float32(rng.IntN(6)) / 4 // few distinct values: many ties
					if trial%2 == 1 {
						v = float32(rng.NormFloat64())
					}
					switch cols {
					case 2:
						s[2*r] = float32(rng.IntN(3)) / 2
						s[2*r+1] = s[2*r] + v
						score[r] = float64(s[2*r+1] - s[2*r])
					default:
						s[r] = v
						score[r] = float64(v)
					}
				}
				if err := runOnce(t, p); err != nil {
					t.Fatal(err)
				}
				got, want := float64(p.Scope["a"].F[0]), pairwiseAUC(score, y)
				if math.IsNaN(want) != math.IsNaN(got) || !math.IsNaN(want) && math.Abs(got-want) > 1e-6 {
					t.Fatalf("scores %s, trial %d: auc %v, pairwise %v\nscores %v\nlabels %v", shape, trial, got, want, score, y)
				}
			}
			rt := &program.Runtime{Ctx: context.Background()}
			if a := testing.AllocsPerRun(5, func() { p.Run(rt) }); a != 0 {
				t.Errorf("scores %s: a step allocates %.0f times, want 0", shape, a)
			}
		}
	}
}

func TestAUCKnownValues(t *testing.T) {
	p := compileModel(t, aucModel("[4]", 4), 1)
	for _, c := range []struct {
		s    []float32
		y    []int32
		want float64
	}{
		{[]float32{0.1, 0.4, 0.35, 0.8}, []int32{0, 0, 1, 1}, 0.75}, // sklearn's roc_auc_score example
		{[]float32{1, 2, 3, 4}, []int32{0, 0, 1, 1}, 1},
		{[]float32{4, 3, 2, 1}, []int32{0, 0, 1, 1}, 0},
		{[]float32{5, 5, 5, 5}, []int32{0, 1, 0, 1}, 0.5},
		{[]float32{1, 2, 3, 4}, []int32{1, 1, 1, 1}, math.NaN()},
		{[]float32{1, float32(math.NaN()), 3, 4}, []int32{0, 1, 0, 1}, math.NaN()},
	} {
		copy(p.Scope["s"].F, c.s)
		copy(p.Scope["y"].I, c.y)
		if err := runOnce(t, p); err != nil {
			t.Fatal(err)
		}
		if got := float64(p.Scope["a"].F[0]); !(got == c.want || math.IsNaN(got) && math.IsNaN(c.want)) {
			t.Errorf("auc(%v, %v) = %v, want %v", c.s, c.y, got, c.want)
		}
	}
}

// A label other than 0 or 1 is a data error naming the op, the row and
// the label, not a panic.
func TestAUCRejectsLabelsOutOfRange(t *testing.T) {
	for _, bad := range []int32{2, -1, 1 << 30} {
		p := compileModel(t, aucModel("[4, 2]", 4), 1)
		copy(p.Scope["y"].I, []int32{0, 1, 1, bad})
		err := runOnce(t, p)
		if err == nil {
			t.Fatalf("label %d: no error", bad)
		}
		for _, want := range []string{"op auc", fmt.Sprintf("label %d in batch row 3", bad), "not 0 or 1"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("label %d: error %q does not mention %q", bad, err, want)
			}
		}
	}
}

// As a train metric: progress lines and the metrics file carry the AUC of
// the logged step's batch, the summary the AUC over the whole data set.
func TestAUCAsTrainMetric(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "binary.yaml")
	if err := os.WriteFile(model, []byte(`psgraph: 1
name: binary
data:
  synthetic: {rows: 256, features: 8, classes: 2, seed: 5}
  features: {name: x}
  label: {name: y}
params:
  W: {shape: [8, 2], init: {type: xavier_uniform, seed: 1}}
  b: {shape: [2]}
ops:
  - {type: matmul, inputs: [x, W], outputs: [z]}
  - {type: add, inputs: [z, b], outputs: [logits]}
  - {type: softmax_cross_entropy, inputs: [logits, y], outputs: [loss]}
  - {type: auc, inputs: [logits, y], outputs: [auc]}
train:
  loss: loss
  metrics: [auc]
  batch: 32
  steps: 200
  optimizer: {type: sgd, lr: 0.1}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := dsl.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	metrics := filepath.Join(dir, "run.jsonl")
	sum, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Metrics: metrics, LogEvery: 50, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if a := sum.Metrics["auc"]; !(a > 0.9 && a <= 1) {
		t.Errorf("auc over the data set after training: %v, want > 0.9", a)
	}
	f, err := os.Open(metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	for sc := bufio.NewScanner(f); sc.Scan(); lines++ {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if a, ok := m["auc"].(float64); !ok || a < 0 || a > 1 {
			t.Errorf("metrics line %s: auc must be a fraction", sc.Text())
		}
	}
	if lines != 5 {
		t.Errorf("%d metrics lines, want 5 (step 1, then every 50 of 200 steps)", lines)
	}
}

// Float targets of 0 and 1 (a label with dtype: float32, [B] or [B, 1],
// as sigmoid_cross_entropy reads it) give the AUC of the same labels as
// class ids; another value is refused naming the row.
func TestAUCTakesFloatLabels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	const rows = 64
	ids := compileModel(t, aucModel(fmt.Sprintf("[%d, 1]", rows), rows), 1)
	for _, yshape := range []string{fmt.Sprintf("[%d]", rows), fmt.Sprintf("[%d, 1]", rows)} {
		src := strings.Replace(aucModel(fmt.Sprintf("[%d, 1]", rows), rows), fmt.Sprintf("y: {shape: [%d], dtype: int32}", rows), "y: {shape: "+yshape+"}", 1)
		fl := compileModel(t, src, 1)
		for trial := 0; trial < 10; trial++ {
			for r := range rows {
				v, c := float32(rng.NormFloat64()), int32(rng.IntN(2))
				ids.Scope["s"].F[r], fl.Scope["s"].F[r] = v, v
				ids.Scope["y"].I[r], fl.Scope["y"].F[r] = c, float32(c)
			}
			if err := runOnce(t, ids); err != nil {
				t.Fatal(err)
			}
			if err := runOnce(t, fl); err != nil {
				t.Fatal(err)
			}
			if a, b := ids.Scope["a"].F[0], fl.Scope["a"].F[0]; a != b {
				t.Fatalf("label %s, trial %d: auc %v with float labels, %v with class ids", yshape, trial, b, a)
			}
		}
		fl.Scope["y"].F[5] = 0.5
		if err := runOnce(t, fl); err == nil || !strings.Contains(err.Error(), "label 0.5 in batch row 5 is not 0 or 1") {
			t.Errorf("label %s: a target of 0.5: %v, want it refused naming the row", yshape, err)
		}
	}
}

// AUCRows's AUC (a radix sort of the rows from 256 of them) is the
// pairwise definition's on scores of every sign with -0, +0, infinities
// and the extremes, with many ties and with few, at sizes on both sides
// of the radix sort's threshold.
func TestAUCRowsOnEverySignAndTie(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, -math.SmallestNonzeroFloat32}
	var a kernels.AUCRows
	for _, n := range []int{1, 255, 256, 3000} {
		for _, distinct := range []int{3, 0} { // 0: normal scores, few ties
			st, yt := tensor.New(tensor.F32, tensor.Shape{n}), tensor.New(tensor.I32, tensor.Shape{n})
			scores := make([]float64, n)
			for i := range n {
				s := float32(rng.NormFloat64() * 1e3)
				if distinct > 0 {
					s = float32(rng.IntN(distinct)-distinct/2) * 0.37
				}
				if rng.IntN(50) == 0 {
					s = special[rng.IntN(len(special))]
				}
				st.F[i], yt.I[i], scores[i] = s, int32(rng.IntN(2)), float64(s)
			}
			a.Reset()
			if err := a.Add(st, yt, n); err != nil {
				t.Fatal(err)
			}
			got, want := a.AUC(), pairwiseAUC(scores, yt.I)
			if !(got == want || math.IsNaN(got) && math.IsNaN(want)) && math.Abs(got-want) > 1e-12 {
				t.Errorf("n=%d distinct=%d: AUC %v, pairwise %v", n, distinct, got, want)
			}
		}
	}
}

// BenchmarkAUCWindow is a training run's AUC over a window of 20,000
// rows of uniform scores (a log line's): the sort is most of it.
func BenchmarkAUCWindow(b *testing.B) {
	const n = 20000
	rng := rand.New(rand.NewPCG(1, 2))
	st, yt := tensor.New(tensor.F32, tensor.Shape{n}), tensor.New(tensor.I32, tensor.Shape{n})
	for i := range n {
		st.F[i], yt.I[i] = rng.Float32(), int32(rng.IntN(2))
	}
	w := kernels.NewAUCWindow(n)
	if err := w.Add(st, yt, n); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		w.AUC()
	}
}
