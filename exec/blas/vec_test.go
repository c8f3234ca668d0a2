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

// Sqrt's vector body gives every value the float64 square root rounded to
// float32 gives, bit for bit: random values of every magnitude, 0, -0,
// +Inf, subnormals, and NaN for NaN and negatives.
func TestSqrtIsCorrectlyRounded(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), 1e-40, math.SmallestNonzeroFloat32, math.MaxFloat32, float32(math.NaN()), -1, -1e-30}
	for _, n := range []int{0, 1, 15, 16, 17, 33, 1029} {
		x := make([]float32, n)
		for i := range x {
			x[i] = math.Float32frombits(r.Uint32() &^ (1 << 31)) // every positive bit pattern
			if i < len(special) {
				x[i] = special[i]
			}
		}
		x = append(x, 42)
		y := make([]float32, n)
		Sqrt(x, y)
		for i := range y {
			want := float32(math.Sqrt(float64(x[i])))
			if math.Float32bits(y[i]) != math.Float32bits(want) && !(math.IsNaN(float64(want)) && math.IsNaN(float64(y[i]))) {
				t.Fatalf("n=%d: sqrt(%g) = %g (%#x), want %g (%#x)", n, x[i], y[i], math.Float32bits(y[i]), want, math.Float32bits(want))
			}
		}
	}
}
