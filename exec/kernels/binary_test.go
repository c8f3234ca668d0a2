package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// add, sub, mul and div in each broadcast form that runs through a vector
// kernel (same shapes, a scalar on either side, a trailing row on either
// side) give z = x op y rounded once, bit for bit (NaN for NaN): the
// scalar forms' rewrites (x + s as 1*x + s, x - s as x + (-s), s*x as
// s*x + (-0), s - y as -y + s) are exact, signed zeros included. Rows of
// 19 and 37 put values in the vector bodies and in their tails; the
// values include NaN, ±0, ±Inf and subnormals.
func TestBinaryBroadcastFormsExact(t *testing.T) {
	special := []float32{float32(math.NaN()), 0, float32(math.Copysign(0, -1)), float32(math.Inf(1)),
		float32(math.Inf(-1)), 1e-40, -1e-40, 3, -0.5, math.MaxFloat32}
	r := rand.New(rand.NewPCG(3, 3))
	fill := func(v []float32) {
		for i := range v {
			if r.IntN(3) == 0 {
				v[i] = special[r.IntN(len(special))]
			} else {
				v[i] = float32(r.NormFloat64())
			}
		}
	}
	ref := map[string]func(a, b float64) float64{
		"add": func(a, b float64) float64 { return a + b },
		"sub": func(a, b float64) float64 { return a - b },
		"mul": func(a, b float64) float64 { return a * b },
		"div": func(a, b float64) float64 { return a / b },
	}
	for _, w := range []int{19, 37} {
		for _, form := range []struct{ name, xs, ys string }{
			{"same", fmt.Sprintf("[5, %d]", w), fmt.Sprintf("[5, %d]", w)},
			{"scalar_y", fmt.Sprintf("[5, %d]", w), "[]"},
			{"scalar_x", "[]", fmt.Sprintf("[5, %d]", w)},
			{"row_y", fmt.Sprintf("[5, %d]", w), fmt.Sprintf("[%d]", w)},
			{"row_x", fmt.Sprintf("[%d]", w), fmt.Sprintf("[5, %d]", w)},
		} {
			for name, f := range ref {
				p := compileModel(t, fmt.Sprintf("psgraph: 1\nstate:\n  x: {shape: %s}\n  y: {shape: %s}\nops:\n  - {type: %s, inputs: [x, y], outputs: [z]}\n",
					form.xs, form.ys, name), 1)
				x, y := p.Scope["x"].F, p.Scope["y"].F
				for _, v := range []struct {
					x, y float32
				}{{0, 0}, {0, float32(math.Copysign(0, -1))}, {float32(math.Copysign(0, -1)), 0}, {1e-40, 3}} {
					// every form with signed zeros and a subnormal as the scalar
					fill(x)
					fill(y)
					if len(x) == 1 {
						x[0] = v.x
					}
					if len(y) == 1 {
						y[0] = v.y
					}
					if err := runOnce(t, p); err != nil {
						t.Fatal(err)
					}
					z := p.Scope["z"].F
					if len(z) != 5*w {
						t.Fatalf("%s %s: z has %d values", name, form.name, len(z))
					}
					for i, got := range z {
						a, b := x[i%len(x)], y[i%len(y)]
						want := float32(f(float64(a), float64(b))) // one rounding (53 >= 2 x 24 + 2)
						if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
							t.Fatalf("%s %s w=%d: z[%d] = %v op %v = %v (%#x), want %v (%#x)", name, form.name, w, i, a, b,
								got, math.Float32bits(got), want, math.Float32bits(want))
						}
					}
				}
			}
		}
	}
}
