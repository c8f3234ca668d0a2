package kernels_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/program"

	"github.com/psgraph/psgraph/dsl"
)

// Forward values of softmax, the element-wise losses, lookup_table,
// reshape and transpose against float64 or hand-computed references, and
// their shape errors.

// compileModel loads a model and compiles it at batch.
func compileModel(t *testing.T, src string, batch int) *program.Program {
	t.Helper()
	g, err := dsl.LoadBytes(filepath.Join(t.TempDir(), "m.yaml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p, err := program.Compile(g, program.CompileOptions{Batch: batch, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func runOnce(t *testing.T, p *program.Program) error {
	t.Helper()
	return p.Run(&program.Runtime{Ctx: context.Background()})
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*(1+math.Abs(b)) }

func TestSoftmaxForward(t *testing.T) {
	p := compileModel(t, `psgraph: 1
state:
  x: {shape: [3, 4]}
ops:
  - {type: softmax, inputs: [x], outputs: [y]}
`, 1)
	x := []float32{
		0.5, -1, 2, 0,
		1000, 1001, 999, 1000, // exp overflows without the max shift
		-1000, -1003, -1001, -1000.5,
	}
	copy(p.Scope["x"].F, x)
	if err := runOnce(t, p); err != nil {
		t.Fatal(err)
	}
	y := p.Scope["y"].F
	for r := 0; r < 3; r++ {
		row := x[r*4 : (r+1)*4]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		var s, got float64
		for _, v := range row {
			s += math.Exp(float64(v) - mx)
		}
		for j, v := range row {
			want := math.Exp(float64(v)-mx) / s
			if !near(float64(y[r*4+j]), want, 1e-6) {
				t.Errorf("softmax row %d [%d] = %v, want %v", r, j, y[r*4+j], want)
			}
			got += float64(y[r*4+j])
		}
		if math.Abs(got-1) > 1e-6 {
			t.Errorf("softmax row %d sums to %v", r, got)
		}
	}
}

func TestSigmoidCrossEntropyForward(t *testing.T) {
	src := `psgraph: 1
state:
  x: {shape: [2, 3]}
  z: {shape: [2, 3]}
ops:
  - {type: sigmoid_cross_entropy, inputs: [x, z], outputs: [loss]}
`
	p := compileModel(t, src, 1)
	x := []float32{-2.5, -0.3, 0, 0.7, 1.9, 4}
	z := []float32{0, 1, 0.5, 0.2, 1, 0}
	copy(p.Scope["x"].F, x)
	copy(p.Scope["z"].F, z)
	if err := runOnce(t, p); err != nil {
		t.Fatal(err)
	}
	var want float64
	for i := range x {
		s := 1 / (1 + math.Exp(-float64(x[i])))
		want -= float64(z[i])*math.Log(s) + (1-float64(z[i]))*math.Log(1-s)
	}
	want /= float64(len(x))
	if got := float64(p.Scope["loss"].F[0]); !near(got, want, 1e-6) {
		t.Errorf("sigmoid_cross_entropy = %v, want %v", got, want)
	}

	// Large logits: the naive formula gives log(0); the loss is exactly
	// |x| for a wrong confident label and ~0 for a right one.
	copy(p.Scope["x"].F, []float32{50, 50, -50, -50, 80, -80})
	copy(p.Scope["z"].F, []float32{1, 0, 0, 1, 0, 0})
	if err := runOnce(t, p); err != nil {
		t.Fatal(err)
	}
	if got, want := float64(p.Scope["loss"].F[0]), (50.0+50+80)/6; !near(got, want, 1e-6) {
		t.Errorf("sigmoid_cross_entropy at large logits = %v, want %v", got, want)
	}
}

func TestMSEForward(t *testing.T) {
	p := compileModel(t, `psgraph: 1
state:
  a: {shape: [5]}
  b: {shape: [5]}
ops:
  - {type: mse, inputs: [a, b], outputs: [loss]}
`, 1)
	a := []float32{1, -2, 0.5, 3, 0}
	b := []float32{0.5, -2, 1.5, -1, 0.25}
	copy(p.Scope["a"].F, a)
	copy(p.Scope["b"].F, b)
	if err := runOnce(t, p); err != nil {
		t.Fatal(err)
	}
	want := (0.25 + 0 + 1 + 16 + 0.0625) / 5
	if got := float64(p.Scope["loss"].F[0]); !near(got, want, 1e-6) {
		t.Errorf("mse = %v, want %v", got, want)
	}
}

const lookupModel = `psgraph: 1
state:
  table: {shape: [4, 3]}
  ids: {shape: [2, 2], dtype: int32}
ops:
  - {type: lookup_table, inputs: [table, ids], outputs: [y]}
`

func TestLookupTablePicksRows(t *testing.T) {
	p := compileModel(t, lookupModel, 1)
	for i := range p.Scope["table"].F {
		p.Scope["table"].F[i] = float32(10*(i/3) + i%3) // row r is r0, r1, r2
	}
	copy(p.Scope["ids"].I, []int32{3, 0, 1, 3})
	if err := runOnce(t, p); err != nil {
		t.Fatal(err)
	}
	if s := p.Scope["y"].Shape; len(s) != 3 || s[0] != 2 || s[1] != 2 || s[2] != 3 {
		t.Fatalf("y shape %v, want [2, 2, 3]", s)
	}
	want := []float32{30, 31, 32, 0, 1, 2, 10, 11, 12, 30, 31, 32}
	for i, v := range p.Scope["y"].F {
		if v != want[i] {
			t.Fatalf("y = %v, want %v", p.Scope["y"].F, want)
		}
	}
}

// An id outside the table is a data error from the kernel, not a panic.
func TestLookupTableRejectsOutOfRangeIDs(t *testing.T) {
	for _, bad := range []int32{4, -1, 1 << 30} {
		p := compileModel(t, lookupModel, 1)
		copy(p.Scope["ids"].I, []int32{0, 1, bad, 2})
		err := runOnce(t, p)
		if err == nil {
			t.Fatalf("id %d: no error", bad)
		}
		for _, want := range []string{"lookup_table", "outside [0, 4)", "position 2", "[2, 2]"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("id %d: error %q does not mention %q", bad, err, want)
			}
		}
	}
	// the gradient's scatter-add checks too
	p := compileModel(t, `psgraph: 1
state:
  dy: {shape: [2, 3]}
  ids: {shape: [2], dtype: int32}
  table: {shape: [4, 3]}
ops:
  - {type: lookup_table_grad, inputs: [dy, ids, table], outputs: [dt]}
`, 1)
	copy(p.Scope["ids"].I, []int32{1, 7})
	if err := runOnce(t, p); err == nil || !strings.Contains(err.Error(), "id 7") {
		t.Fatalf("lookup_table_grad with id 7: error %v", err)
	}
}

func TestTransposeForward(t *testing.T) {
	p := compileModel(t, `psgraph: 1
state:
  x: {shape: [2, 3, 4]}
  m: {shape: [2, 3]}
ops:
  - {type: transpose, inputs: [x], outputs: [y], attrs: {perm: [2, 0, 1]}}
  - {type: transpose, inputs: [m], outputs: [mt]}
`, 1)
	for i := range p.Scope["x"].F {
		p.Scope["x"].F[i] = float32(i)
	}
	for i := range p.Scope["m"].F {
		p.Scope["m"].F[i] = float32(i)
	}
	if err := runOnce(t, p); err != nil {
		t.Fatal(err)
	}
	y := p.Scope["y"]
	if s := y.Shape; len(s) != 3 || s[0] != 4 || s[1] != 2 || s[2] != 3 {
		t.Fatalf("y shape %v, want [4, 2, 3]", s)
	}
	for k := 0; k < 4; k++ {
		for i := 0; i < 2; i++ {
			for j := 0; j < 3; j++ {
				if got, want := y.F[(k*2+i)*3+j], float32((i*3+j)*4+k); got != want {
					t.Fatalf("y[%d,%d,%d] = %v, want x[%d,%d,%d] = %v", k, i, j, got, i, j, k, want)
				}
			}
		}
	}
	mt := p.Scope["mt"]
	for j := 0; j < 3; j++ {
		for i := 0; i < 2; i++ {
			if got, want := mt.F[j*2+i], float32(i*3+j); got != want {
				t.Fatalf("mt[%d,%d] = %v, want %v", j, i, got, want)
			}
		}
	}
}

// -1 in reshape's shape is the batch, in the DSL check (at train.batch) and
// in the executor (at whatever batch a program is compiled for); the
// backward pass, generated at train.batch, also runs at another batch.
func TestReshapeBatchDimension(t *testing.T) {
	dir := t.TempDir()
	var csv strings.Builder
	for r := 0; r < 10; r++ {
		fmt.Fprintf(&csv, "%d,%d,%d,%d,%d\n", r, r+1, r%3, 2*r, r%2)
	}
	if err := os.WriteFile(filepath.Join(dir, "d.csv"), []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	src := `psgraph: 1
data:
  csv: d.csv
  features: {name: x, columns: [0, 4]}
params:
  W: {shape: [4, 6], init: {type: uniform, min: -1, max: 1, seed: 3}}
ops:
  - {type: matmul, inputs: [x, W], outputs: [h]}
  - {type: reshape, inputs: [h], outputs: [r], attrs: {shape: [-1, 2, 3]}}
  - {type: tanh, inputs: [r], outputs: [a]}
  - {type: mean, inputs: [a], outputs: [loss]}
train: {loss: loss, batch: 4, optimizer: {type: sgd, lr: 0.1}}
`
	path := filepath.Join(dir, "m.yaml")
	g, err := dsl.LoadBytes(path, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if s := g.Types["r"].Shape; len(s) != 3 || s[0] != 4 || s[1] != 2 || s[2] != 3 {
		t.Fatalf("checked type of r: %v, want [4, 2, 3]", g.Types["r"])
	}
	for _, batch := range []int{4, 3, 7} {
		p, err := program.Compile(g, program.CompileOptions{Batch: batch, Workers: 1})
		if err != nil {
			t.Fatalf("batch %d: %v", batch, err)
		}
		x := p.Scope["x"]
		for i := range x.F {
			x.F[i] = float32(i%5) / 4
		}
		if err := p.Run(&program.Runtime{Ctx: context.Background()}); err != nil {
			t.Fatalf("batch %d: %v", batch, err)
		}
		r, h := p.Scope["r"], p.Scope["h"]
		if s := r.Shape; s[0] != batch || s[1] != 2 || s[2] != 3 {
			t.Errorf("batch %d: r has shape %v", batch, s)
		}
		for i := range h.F {
			if r.F[i] != h.F[i] {
				t.Fatalf("batch %d: reshape changed element %d: %v vs %v", batch, i, r.F[i], h.F[i])
			}
		}
		// loss = mean(tanh(r)): dloss/dh = (1 - a²) / numel at this batch
		gh, a := p.Scope["h@GRAD"], p.Scope["a"]
		if gh == nil || gh.Shape[0] != batch {
			t.Fatalf("batch %d: h@GRAD is %v", batch, gh)
		}
		for i, v := range a.F {
			if want := (1 - float64(v)*float64(v)) / float64(batch*6); !near(float64(gh.F[i]), want, 1e-5) {
				t.Fatalf("batch %d: h@GRAD[%d] = %v, want %v", batch, i, gh.F[i], want)
			}
		}
		p.Close()
	}

	// numel must match, in the DSL check; -1 there is train.batch too
	bad := strings.Replace(src, "shape: [-1, 2, 3]", "shape: [-1, 4, 2]", 1)
	_, err = dsl.LoadBytes(path, []byte(bad))
	if err == nil {
		t.Fatal("reshape [4, 6] to [-1, 4, 2] at batch 4 was accepted")
	}
	for _, want := range []string{"m.yaml:9", "cannot reshape [4, 6] (24 elements) to [4, 4, 2] (32 elements)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// softmax, softmax_cross_entropy and its gradient at every row width from 1
// to 40 (rows narrower than 16 go through one batched exponential, wider
// ones row by row) and 37 rows, with values that need the max shift,
// against float64: each probability within 1e-6 relative plus what
// rounding x - max to float32 costs (|x - max| 2^-24 relative), the loss
// within 1e-6, the gradient (softmax - onehot)/rows within 1e-6. An x - max
// below -87.33654 counts as -87.33654 (blas.ExpSub: float32's smallest
// normal).
func TestSoftmaxEveryWidth(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for c := 1; c <= 40; c++ {
		const rows = 37
		p := compileModel(t, fmt.Sprintf(`psgraph: 1
state:
  x: {shape: [%d, %d]}
  label: {shape: [%d], dtype: int32}
ops:
  - {type: softmax, inputs: [x], outputs: [y]}
  - {type: softmax_cross_entropy, inputs: [x, label], outputs: [loss]}
  - {type: softmax_cross_entropy_grad, inputs: [one, x, label], outputs: [dx]}
  - {type: fill, outputs: [one], attrs: {value: 1, shape: []}}
`, rows, c, rows), 1)
		x, label := p.Scope["x"].F, p.Scope["label"].I
		for i := range x {
			x[i] = float32(r.NormFloat64()*20) + float32(i/c%3-1)*500
		}
		for i := range label {
			label[i] = int32(r.IntN(c))
		}
		if err := runOnce(t, p); err != nil {
			t.Fatal(err)
		}
		y, dx := p.Scope["y"].F, p.Scope["dx"].F
		var loss float64
		for i := 0; i < rows; i++ {
			row := x[i*c : (i+1)*c]
			mx := math.Inf(-1)
			for _, v := range row {
				mx = math.Max(mx, float64(v))
			}
			e := func(v float32) float64 { return math.Exp(math.Max(float64(v)-mx, -87.33654)) }
			var s float64
			for _, v := range row {
				s += e(v)
			}
			loss += math.Log(s) + mx - float64(row[label[i]])
			for j, v := range row {
				want := e(v) / s
				if got := float64(y[i*c+j]); math.Abs(got-want) > want*(1e-6+math.Abs(float64(v)-mx)*0x1p-24) {
					t.Fatalf("c=%d: softmax[%d, %d] = %v, want %v", c, i, j, got, want)
				}
				g := want
				if j == int(label[i]) {
					g--
				}
				if got := float64(dx[i*c+j]); math.Abs(got-g/rows) > 1e-6/rows {
					t.Fatalf("c=%d: softmax_cross_entropy_grad[%d, %d] = %v, want %v", c, i, j, got, g/rows)
				}
			}
		}
		if got := float64(p.Scope["loss"].F[0]); math.Abs(got-loss/rows) > 1e-6*(1+math.Abs(loss/rows)) {
			t.Fatalf("c=%d: softmax_cross_entropy = %v, want %v", c, got, loss/rows)
		}
	}
}
