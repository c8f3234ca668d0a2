package blas

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The SIMD bodies against plain loops, for lengths around the vector width.
func TestVecOps(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 33, 100, 1024, 1029} {
		x, y, dy := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range x {
			x[i], dy[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
		}
		x = append(x, 42) // beyond len(out): must be ignored
		out := make([]float32, n)
		Relu(x, out)
		for i := range out {
			if want := float32(math.Max(float64(x[i]), 0)); out[i] != want {
				t.Fatalf("n=%d: relu[%d] = %v, want %v", n, i, out[i], want)
			}
		}
		copy(y, out)
		ReluGrad(dy, y, out)
		for i := range out {
			want := float32(0)
			if y[i] > 0 {
				want = dy[i]
			}
			if out[i] != want {
				t.Fatalf("n=%d: relu_grad[%d] = %v, want %v", n, i, out[i], want)
			}
		}
		Add(x, dy, out)
		for i := range out {
			if out[i] != x[i]+dy[i] {
				t.Fatalf("n=%d: add[%d] = %v, want %v", n, i, out[i], x[i]+dy[i])
			}
		}
		Sub(x, dy, out)
		for i := range out {
			if out[i] != x[i]-dy[i] {
				t.Fatalf("n=%d: sub[%d] = %v, want %v", n, i, out[i], x[i]-dy[i])
			}
		}
		Mul(x, dy, out)
		for i := range out {
			if out[i] != x[i]*dy[i] {
				t.Fatalf("n=%d: mul[%d] = %v, want %v", n, i, out[i], x[i]*dy[i])
			}
		}
		Scale(-0.25, 3, x, out)
		for i := range out {
			// FMA rounds once; -0.25*x is exact, so both agree.
			if want := -0.25*x[i] + 3; out[i] != want {
				t.Fatalf("n=%d: scale[%d] = %v, want %v", n, i, out[i], want)
			}
		}
	}
	rows, n := 7, 37
	x := make([]float32, rows*n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y := make([]float32, n)
	SumRows(x, rows, y)
	for j := 0; j < n; j++ {
		var s float32
		for i := 0; i < rows; i++ {
			s += x[i*n+j]
		}
		if y[j] != s {
			t.Fatalf("sum_rows[%d] = %v, want %v", j, y[j], s)
		}
	}
}
