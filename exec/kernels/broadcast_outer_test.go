package kernels_test

import (
	"fmt"
	"math"
	"testing"
)

// A column [N, 1] against a row [1, M] or [M], either side first, gives
// z[i, j] = x op y element by element, for every binary op: the outer
// broadcast's row-by-row path against values computed here.
func TestBinaryOuterBroadcast(t *testing.T) {
	ops := map[string]func(a, b float32) float32{
		"add": func(a, b float32) float32 { return a + b },
		"sub": func(a, b float32) float32 { return a - b },
		"mul": func(a, b float32) float32 { return a * b },
		"div": func(a, b float32) float32 { return a / b },
		"min": func(a, b float32) float32 { return float32(math.Min(float64(a), float64(b))) },
		"max": func(a, b float32) float32 { return float32(math.Max(float64(a), float64(b))) },
		"less": func(a, b float32) float32 {
			if a < b {
				return 1
			}
			return 0
		},
		"greater": func(a, b float32) float32 {
			if a > b {
				return 1
			}
			return 0
		},
	}
	col := []float32{1, -2, 3, 0.5}
	row := []float32{3, 1, -2, 4, 0.25}
	for name, f := range ops {
		for _, c := range []struct{ x, y, rowShape string }{
			{"c", "r", "[1, 5]"}, {"r", "c", "[1, 5]"}, {"c", "r", "[5]"}, {"r", "c", "[5]"},
		} {
			t.Run(fmt.Sprintf("%s/%s%s/%s", name, c.x, c.y, c.rowShape), func(t *testing.T) {
				p := compileModel(t, fmt.Sprintf(`psgraph: 1
state:
  c: {shape: [4, 1]}
  r: {shape: %s}
ops:
  - {type: %s, inputs: [%s, %s], outputs: [z]}
`, c.rowShape, name, c.x, c.y), 1)
				copy(p.Scope["c"].F, col)
				copy(p.Scope["r"].F, row)
				if err := runOnce(t, p); err != nil {
					t.Fatal(err)
				}
				z := p.Scope["z"]
				if !z.Shape.Equal([]int{4, 5}) {
					t.Fatalf("z is %v", z.Shape)
				}
				for i, a := range col {
					for j, b := range row {
						want := f(a, b)
						if c.x == "r" {
							want = f(b, a)
						}
						if got := z.F[i*5+j]; got != want {
							t.Errorf("z[%d, %d] = %v, want %v", i, j, got, want)
						}
					}
				}
			})
		}
	}
}
