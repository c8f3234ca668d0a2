package kernels_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/program"

	"github.com/psgraph/psgraph/dsl"
)

func dropoutProgram(t *testing.T, rows int, targets []string) *program.Program {
	t.Helper()
	src := fmt.Sprintf(`psgraph: 1
state:
  x: {shape: [%d, 10]}
ops:
  - {type: dropout, inputs: [x], outputs: [y], attrs: {rate: 0.3, seed: 5}}
`, rows)
	g, err := dsl.LoadBytes(filepath.Join(t.TempDir(), "m.yaml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p, err := program.Compile(g, program.CompileOptions{Workers: 1, Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	for i := range p.Scope["x"].F {
		p.Scope["x"].F[i] = 1 + float32(i%7) + float32(i)/1000
	}
	return p
}

// TestDropoutMask: dropout zeroes a fraction rate of the elements (within
// 4 standard deviations over 4000), scales the others by exactly
// 1/(1-rate), draws the same mask when a step is run again and another
// one at the next step; trainer 1 of 2 with 200 rows draws the mask of
// rows 200..399 of a local run with 400 (so distributed training equals
// local); and a program compiled for evaluation (Targets) is the identity.
func TestDropoutMask(t *testing.T) {
	run := func(p *program.Program, step int64, trainer, count int) []float32 {
		if err := p.Run(&program.NodeRuntime{Ctx: context.Background(), StepNum: step, TrainerIndex: trainer, TrainerCount: count}); err != nil {
			t.Fatal(err)
		}
		return append([]float32{}, p.Scope["y"].F...)
	}
	local := dropoutProgram(t, 400, nil)
	x := local.Scope["x"].F
	y := run(local, 3, 0, 1)
	zeros := 0
	for i, v := range y {
		switch want := x[i] * float32(1/(1-0.3)); v {
		case 0:
			zeros++
		case want:
		default:
			t.Fatalf("y[%d] = %v, neither 0 nor x/(1-rate) = %v", i, v, want)
		}
	}
	if frac, sd := float64(zeros)/4000, math.Sqrt(0.3*0.7/4000); math.Abs(frac-0.3) > 4*sd {
		t.Errorf("%.4f of the elements dropped, want 0.3 ± %.4f", frac, 4*sd)
	}
	if again := run(local, 3, 0, 1); !equal(again, y) {
		t.Error("the same step drew another mask")
	}
	next := run(local, 4, 0, 1)
	differ := 0
	for i := range y {
		if (next[i] == 0) != (y[i] == 0) {
			differ++
		}
	}
	if f := float64(differ) / 4000; math.Abs(f-2*0.3*0.7) > 0.05 {
		t.Errorf("steps 3 and 4 differ at %.3f of the elements, want about %.2f (independent masks)", f, 2*0.3*0.7)
	}
	half := dropoutProgram(t, 200, nil)
	copy(half.Scope["x"].F, x[2000:])
	if got := run(half, 3, 1, 2); !equal(got, y[2000:]) {
		t.Error("trainer 1 of 2 drew another mask than rows 200..399 of the local run")
	}
	copy(half.Scope["x"].F, x[:2000])
	if got := run(half, 3, 0, 2); !equal(got, y[:2000]) {
		t.Error("trainer 0 of 2 drew another mask than rows 0..199 of the local run")
	}
	eval := dropoutProgram(t, 400, []string{"y"})
	if got := run(eval, 3, 0, 1); !equal(got, x) {
		t.Error("dropout in an evaluation program (Targets) is not the identity")
	}
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBinaryAccuracy against a hand count: scores 0.9 0.2 0.6 0.4 0.5 with
// labels 1 0 0 1 0 are right at rows 0, 1 and 4 (0.5 is not above the
// threshold 0.5): 3/5, with int32 and with float32 labels; with threshold
// 0 on logits -1 2 0.1 -3 the labels 0 1 0 0 are right at rows 0, 1, 3:
// 3/4. A label other than 0 or 1 stops the run naming the row.
func TestBinaryAccuracy(t *testing.T) {
	for _, dt := range []string{"int32", "float32"} {
		p := compileModel(t, `psgraph: 1
state:
  s: {shape: [5, 1]}
  y: {shape: [5], dtype: `+dt+`}
  z: {shape: [4]}
  yz: {shape: [4], dtype: int32}
ops:
  - {type: binary_accuracy, inputs: [s, y], outputs: [acc]}
  - {type: binary_accuracy, inputs: [z, yz], outputs: [acc0], attrs: {threshold: 0}}
`, 1)
		copy(p.Scope["s"].F, []float32{0.9, 0.2, 0.6, 0.4, 0.5})
		if dt == "int32" {
			copy(p.Scope["y"].I, []int32{1, 0, 0, 1, 0})
		} else {
			copy(p.Scope["y"].F, []float32{1, 0, 0, 1, 0})
		}
		copy(p.Scope["z"].F, []float32{-1, 2, 0.1, -3})
		copy(p.Scope["yz"].I, []int32{0, 1, 0, 0})
		if err := runOnce(t, p); err != nil {
			t.Fatal(err)
		}
		if got := p.Scope["acc"].F[0]; got != 0.6 {
			t.Errorf("%s labels: binary accuracy %v, want 0.6", dt, got)
		}
		if got := p.Scope["acc0"].F[0]; got != 0.75 {
			t.Errorf("threshold 0: binary accuracy %v, want 0.75", got)
		}
		p.Scope["yz"].I[2] = 2
		if err := runOnce(t, p); err == nil || !strings.Contains(err.Error(), "row 2: label 2 is not 0 or 1") {
			t.Errorf("label 2: error %v, want one naming row 2", err)
		}
	}
}
