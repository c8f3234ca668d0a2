package blas

import (
	"math"
	"testing"
)

// ExpSub, vector body and scalar tail alike, is math.Exp rounded to
// float32 within 2 ulp for x - m in [-87.3, 0], gives exp(-87.33654) below
// (x = -Inf too), NaN for NaN, and math.Exp's value above 0; its sum is
// the values' sum in float64 within 1e-6 relative. Lengths 1 to 40 put
// every value both in the vector body and in the tail.
func TestExpSub(t *testing.T) {
	low := float32(math.Exp(-87.33654))
	worst := 0.0
	for n := 1; n <= 40; n++ {
		x := make([]float32, 0, 6000)
		for v := float32(0); v >= -87.3; v -= 0.0147 {
			x = append(x, v+3) // m = 3
		}
		x = append(x, 3, 3-1e-7, 3-0.34657359, 3-0.69314718, -90, -1e30, float32(math.Inf(-1)), 3.5)
		for lo := 0; lo < len(x); lo += n {
			xs := x[lo:min(lo+n, len(x))]
			y := make([]float32, len(xs))
			sum := ExpSub(xs, 3, y)
			var want64 float64
			for i, v := range xs {
				want := float32(math.Exp(float64(v - 3)))
				if v-3 < -87.33654 {
					want = low
				}
				want64 += float64(y[i])
				ulp := math.Abs(float64(y[i])-float64(want)) / float64(math.Nextafter32(want, 2)-want)
				if ulp > 2 || math.IsNaN(float64(y[i])) {
					t.Fatalf("n=%d: exp(%v - 3) = %v, want %v (%.1f ulp)", n, v, y[i], want, ulp)
				}
				worst = max(worst, ulp)
			}
			if math.Abs(float64(sum)-want64) > 1e-6*want64 {
				t.Fatalf("n=%d: sum %v, the values add up to %v", n, sum, want64)
			}
		}
	}
	t.Logf("largest error %.2f ulp", worst)
	for n := 1; n <= 33; n += 16 {
		x := make([]float32, n)
		x[n-1] = float32(math.NaN())
		y := make([]float32, n)
		if s := ExpSub(x, 0, y); !math.IsNaN(float64(y[n-1])) || !math.IsNaN(float64(s)) {
			t.Errorf("n=%d: exp(NaN) = %v, sum %v", n, y[n-1], s)
		}
	}
}

func BenchmarkExpSub(b *testing.B) {
	x := make([]float32, 1024)
	for i := range x {
		x[i] = -float32(i) / 64
	}
	y := make([]float32, len(x))
	b.Run("ExpSub", func(b *testing.B) {
		for range b.N {
			ExpSub(x, 0, y)
		}
	})
	b.Run("math.Exp", func(b *testing.B) {
		for range b.N {
			for i, v := range x {
				y[i] = float32(math.Exp(float64(v)))
			}
		}
	})
}
