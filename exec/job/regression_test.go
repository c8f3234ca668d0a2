package job

import (
	"bufio"
	"context"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/trainer"

	"github.com/psgraph/psgraph/exec/data"
)

// leastSquares reads testdata/regression/linear.csv without psgraph's
// loader and solves the normal equations for y ~ x W + b: the closed form
// the trained parameters must reach.
func leastSquares(t *testing.T, path string) (w [3]float64, b float64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var a [4][5]float64 // [X 1]^T [X 1] | [X 1]^T y
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		parts := strings.Split(sc.Text(), ",")
		var row [5]float64
		for i, p := range parts {
			v, err := strconv.ParseFloat(p, 64)
			if err != nil {
				t.Fatal(err)
			}
			row[i] = v
		}
		x := [4]float64{row[0], row[1], row[2], 1}
		for i := range 4 {
			for j := range 4 {
				a[i][j] += x[i] * x[j]
			}
			a[i][4] += x[i] * row[3]
		}
	}
	for c := range 4 { // Gauss-Jordan
		p := a[c][c]
		for j := range 5 {
			a[c][j] /= p
		}
		for r := range 4 {
			if r != c {
				k := a[r][c]
				for j := range 5 {
					a[r][j] -= k * a[c][j]
				}
			}
		}
	}
	return [3]float64{a[0][4], a[1][4], a[2][4]}, a[3][4]
}

// A float label (dtype: float32) trains a linear regression with mse: full
// batch gradient descent reaches the least-squares coefficients, which are
// near the generating ones (2, -3, 0.5; intercept 1).
func TestLinearRegressionRecoversCoefficients(t *testing.T) {
	const path = "../../testdata/regression/linear.yaml"
	w, b := leastSquares(t, "../../testdata/regression/linear.csv")
	for i, want := range []float64{2, -3, 0.5} {
		if math.Abs(w[i]-want) > 0.05 {
			t.Fatalf("closed form W[%d] = %g, far from the generating %g: the data file changed", i, w[i], want)
		}
	}
	sum, params := train(t, path, trainer.RunOptions{Role: "local"})
	for i := range 3 {
		if got := float64(params["W"].F[i]); math.Abs(got-w[i]) > 1e-4 {
			t.Errorf("W[%d] = %.6f, least squares %.6f", i, got, w[i])
		}
	}
	if got := float64(params["b"].F[0]); math.Abs(got-b) > 1e-4 {
		t.Errorf("b = %.6f, least squares %.6f", got, b)
	}
	// The residual is the noise: its mean square is about 0.1^2.
	if sum.Loss > 0.02 || sum.Loss < 0.005 {
		t.Errorf("final mse %g, want about 0.01 (the noise variance)", sum.Loss)
	}
}

// train.epochs sets the steps: ceil(epochs x rows / (batch x trainers)),
// counted from the file (its header is not a row), in memory or streamed;
// --steps still wins.
func TestEpochsSetSteps(t *testing.T) {
	src, err := os.ReadFile("../../testdata/regression/linear.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	csv, _ := os.ReadFile("../../testdata/regression/linear.csv")
	if err := os.WriteFile(dir+"/linear.csv", csv, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		edit       string
		steps, run int
	}{
		{"  epochs: 2\n", 0, 5},             // ceil(2 x 240 / 100)
		{"  epochs: 2\n", 3, 3},             // --steps wins
		{"  epochs: 5\n", 0, 12},            // 1200 / 100
		{"  epochs: 3\n  # stream\n", 0, 8}, // ceil(720 / 100), rows counted on disk
		{"  epochs: 2\n  # stream\n", 1, 1}, // --steps wins streamed
	} {
		m := strings.Replace(string(src), "  steps: 300\n", c.edit, 1)
		m = strings.Replace(m, "  batch: 240\n", "  batch: 100\n", 1)
		if strings.Contains(c.edit, "stream") {
			m = strings.Replace(m, "  header: true\n", "  header: true\n  stream: true\n", 1)
		}
		path := dir + "/m.yaml"
		if err := os.WriteFile(path, []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
		sum, _ := train(t, path, trainer.RunOptions{Role: "local", Steps: c.steps})
		if sum.Steps != c.run {
			t.Errorf("%q --steps %d: ran %d steps, want %d", strings.TrimSpace(c.edit), c.steps, sum.Steps, c.run)
		}
	}
	g := load(t, "../../testdata/regression/linear.yaml")
	g.Train.Steps, g.Train.Epochs = 0, 3
	rows := func() (int64, error) { return 240, nil }
	for _, c := range []struct{ batch, trainers, want int }{{50, 2, 8}, {60, 2, 6}, {7, 3, 35}, {240, 1, 3}, {1000, 4, 1}} {
		if got, err := trainer.StepsOf(g, 0, c.batch, c.trainers, rows); err != nil || got != c.want {
			t.Errorf("3 epochs of 240 rows, batch %d, %d trainers: %d steps (%v), want %d", c.batch, c.trainers, got, err, c.want)
		}
	}
}

// A step of a model with a float label, fed from memory or streamed from
// a file with a header (rewound past its header at every pass), allocates
// nothing.
func TestFloatLabelStepDoesNotAllocate(t *testing.T) {
	g := load(t, "../../testdata/regression/linear.yaml")
	p, err := program.Compile(g, program.CompileOptions{Batch: 60})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := program.Init(p, program.InitOptions{From: ""}); err != nil {
		t.Fatal(err)
	}
	loaded, err := data.LoadSplit(g.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := loaded.Train
	file, err := data.OpenStream(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	f := program.NewFeeder(g, p.Scope)
	rt := &program.Runtime{Ctx: context.Background()}
	for name, st := range map[string]data.Batches{"memory": data.NewStream(set), "file": file} {
		k := int64(0)
		step := func() {
			if err := f.Fill(st, k*60); err != nil {
				t.Fatal(err)
			}
			rt.StepNum = k
			if err := p.Run(rt); err != nil {
				t.Fatal(err)
			}
			k++
		}
		for range 8 { // two passes: the file's row count is known
			step()
		}
		if allocs := testing.AllocsPerRun(50, step); allocs != 0 {
			t.Errorf("%s: %.1f allocations per step, want 0", name, allocs)
		}
	}
}
