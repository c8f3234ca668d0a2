package kernels_test

import (
	"math"
	"testing"
)

// Gradient-check cases of pow and row_mean (the optimizers' ops), kept
// beside their forward tests.
func init() {
	gradCases = append(gradCases,
		gradCase{op: "pow", in: []in{f32(0.5, 2, 3, 4)}, attrs: "{exponent: 0.5}"},
		gradCase{op: "pow", in: []in{f32(0.5, 2, 3, 4)}, attrs: "{exponent: -0.5}"},
		gradCase{op: "pow", in: []in{f32(0.5, 2, 3, 4)}, attrs: "{exponent: 2}"},
		gradCase{op: "pow", in: []in{f32(0.5, 2, 3, 4)}, attrs: "{exponent: -1.3}"},
		gradCase{op: "pow", in: []in{away(0.3, 1.5, 5)}, attrs: "{exponent: 3}"},
		gradCase{op: "row_mean", in: []in{std(3, 4)}},
		gradCase{op: "row_mean", in: []in{std(2, 3, 4)}},
		gradCase{op: "row_mean", in: []in{std(5)}},
		gradCase{op: "row_mean_grad", in: []in{std(3, 1), fixed(std(3, 4))}},
		gradCase{op: "row_mean_grad", in: []in{std(2, 1, 1), fixed(std(2, 2, 2))}},
	)
}

// pow against math.Pow in float64, with its fast paths (0.5 is sqrt's
// kernel bit for bit, -0.5, 1, 2) and the general one; NaN for a negative
// base with a fractional exponent, as math.Pow and torch.pow.
func TestPowForward(t *testing.T) {
	p := compileModel(t, `psgraph: 1
state:
  x: {shape: [6]}
ops:
  - {type: pow, inputs: [x], outputs: [half], attrs: {exponent: 0.5}}
  - {type: sqrt, inputs: [x], outputs: [sqrt]}
  - {type: pow, inputs: [x], outputs: [rsqrt], attrs: {exponent: -0.5}}
  - {type: pow, inputs: [x], outputs: [one], attrs: {exponent: 1}}
  - {type: pow, inputs: [x], outputs: [two], attrs: {exponent: 2}}
  - {type: pow, inputs: [x], outputs: [p07], attrs: {exponent: 0.7}}
  - {type: pow, inputs: [x], outputs: [m13], attrs: {exponent: -1.3}}
`, 1)
	x := []float32{0.1, 0.25, 1, 2.5, 1e4, 3e-7}
	copy(p.Scope["x"].F, x)
	if err := runOnce(t, p); err != nil {
		t.Fatal(err)
	}
	for name, e := range map[string]float64{"half": 0.5, "rsqrt": -0.5, "one": 1, "two": 2, "p07": 0.7, "m13": -1.3} {
		for i, v := range x {
			want := math.Pow(float64(v), e)
			if got := float64(p.Scope[name].F[i]); !near(got, want, 1e-6) || math.Abs(got-want) > 1e-6*math.Abs(want) {
				t.Errorf("pow(%v, %v) = %v, want %v", v, e, got, want)
			}
		}
	}
	for i := range x {
		if p.Scope["half"].F[i] != p.Scope["sqrt"].F[i] {
			t.Errorf("pow(%v, 0.5) = %v but sqrt = %v", x[i], p.Scope["half"].F[i], p.Scope["sqrt"].F[i])
		}
	}
	p.Scope["x"].F[0] = -2
	if err := runOnce(t, p); err != nil {
		t.Fatal(err)
	}
	if v := p.Scope["p07"].F[0]; !math.IsNaN(float64(v)) {
		t.Errorf("pow(-2, 0.7) = %v, want NaN", v)
	}
	if v := p.Scope["two"].F[0]; v != 4 {
		t.Errorf("pow(-2, 2) = %v, want 4", v)
	}
}

// row_mean of [N, D], [N, A, B] and [N] against float64 means of each
// row; its output keeps the rank, every dimension after the first 1.
func TestRowMeanForward(t *testing.T) {
	p := compileModel(t, `psgraph: 1
state:
  a: {shape: [3, 4]}
  b: {shape: [2, 2, 3]}
  c: {shape: [4]}
ops:
  - {type: row_mean, inputs: [a], outputs: [ra]}
  - {type: row_mean, inputs: [b], outputs: [rb]}
  - {type: row_mean, inputs: [c], outputs: [rc]}
`, 1)
	for _, n := range []string{"a", "b", "c"} {
		for i := range p.Scope[n].F {
			p.Scope[n].F[i] = float32(math.Sin(float64(3*i+len(n))) * 2)
		}
	}
	if err := runOnce(t, p); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in, out string
		shape   []int
	}{{"a", "ra", []int{3, 1}}, {"b", "rb", []int{2, 1, 1}}, {"c", "rc", []int{4}}} {
		y := p.Scope[c.out]
		if !y.Shape.Equal(c.shape) {
			t.Fatalf("row_mean of %v has shape %v, want %v", p.Scope[c.in].Shape, y.Shape, c.shape)
		}
		x := p.Scope[c.in].F
		w := len(x) / c.shape[0]
		for r := 0; r < c.shape[0]; r++ {
			var s float64
			for _, v := range x[r*w : (r+1)*w] {
				s += float64(v)
			}
			if want := s / float64(w); !near(float64(y.F[r]), want, 1e-6) {
				t.Errorf("row_mean(%s) row %d = %v, want %v", c.in, r, y.F[r], want)
			}
		}
	}
}
