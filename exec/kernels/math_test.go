package kernels_test

import (
	"context"
	"math"
	"testing"

	"github.com/psgraph/psgraph/exec/program"
)

// TestMathForward checks cos, sin, exp, log, floor, clip, min, max, less,
// greater and step against float64 math on chosen values, broadcasting a
// scalar y for the binary ops.
func TestMathForward(t *testing.T) {
	p := compileModel(t, `psgraph: 1
state:
  x: {shape: [6]}
  y: {shape: []}
ops:
  - {type: cos, inputs: [x], outputs: [cos]}
  - {type: sin, inputs: [x], outputs: [sin]}
  - {type: exp, inputs: [x], outputs: [exp]}
  - {type: log, inputs: [x], outputs: [log]}
  - {type: floor, inputs: [x], outputs: [floor]}
  - {type: clip, inputs: [x], outputs: [clip], attrs: {min: -1, max: 0.5}}
  - {type: clip, inputs: [x], outputs: [clip_lo], attrs: {min: 0}}
  - {type: min, inputs: [x, y], outputs: [min]}
  - {type: max, inputs: [y, x], outputs: [max]}
  - {type: less, inputs: [x, y], outputs: [less]}
  - {type: greater, inputs: [x, y], outputs: [greater]}
  - {type: step, outputs: [step]}
  - {type: sum_squares, inputs: [x], outputs: [ss]}
`, 1)
	x := []float64{-2.5, -1, -0.25, 0.3, 1, 2.7}
	for i, v := range x {
		p.Scope["x"].F[i] = float32(v)
	}
	p.Scope["y"].F[0] = 0.3
	if err := p.Run(&program.NodeRuntime{Ctx: context.Background(), StepNum: 41}); err != nil {
		t.Fatal(err)
	}
	b := func(c bool) float64 {
		if c {
			return 1
		}
		return 0
	}
	want := map[string]func(v float64) float64{
		"cos":     math.Cos,
		"sin":     math.Sin,
		"exp":     math.Exp,
		"log":     math.Log,
		"floor":   math.Floor,
		"clip":    func(v float64) float64 { return math.Min(math.Max(v, -1), 0.5) },
		"clip_lo": func(v float64) float64 { return math.Max(v, 0) },
		"min":     func(v float64) float64 { return math.Min(v, 0.3) },
		"max":     func(v float64) float64 { return math.Max(v, 0.3) },
		"less":    func(v float64) float64 { return b(float32(v) < 0.3) },
		"greater": func(v float64) float64 { return b(float32(v) > 0.3) },
	}
	for name, f := range want {
		for i, v := range x {
			got, w := float64(p.Scope[name].F[i]), f(float64(float32(v)))
			if math.IsNaN(w) {
				if !math.IsNaN(got) {
					t.Errorf("%s(%g) = %g, want NaN", name, v, got)
				}
				continue
			}
			if !near(got, w, 1e-6) {
				t.Errorf("%s(%g) = %g, want %g", name, v, got, w)
			}
		}
	}
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	if got := float64(p.Scope["ss"].F[0]); !near(got, ss, 1e-6) {
		t.Errorf("sum_squares = %g, want %g", got, ss)
	}
	if got := p.Scope["step"].F[0]; got != 42 {
		t.Errorf("step at StepNum 41 = %g, want 42 (steps count from 1)", got)
	}
}
