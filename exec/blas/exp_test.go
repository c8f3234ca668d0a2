package blas

import (
	"math"
	"testing"
)

// ExpSub, vector body and scalar tail alike, is math.Exp rounded to
// float32 within 2 ulp for x - m in [-87.3, 88.7], gives exp(-87.33654)
// below (x = -Inf too), NaN for NaN and +Inf above 88.73; its sum is the
// values' sum in float64 within 1e-6 relative. Lengths 1 to 40 put every
// value both in the vector body and in the tail, at offsets 0 to 3 into
// the slices (misaligned vector loads and stores).
func TestExpSub(t *testing.T) {
	low := float32(math.Exp(-87.33654))
	worst := 0.0
	x := make([]float32, 0, 6000)
	for v := float32(0); v >= -87.3; v -= 0.0147 {
		x = append(x, v+3) // m = 3
	}
	x = append(x, 3, 3-1e-7, 3-0.34657359, 3-0.69314718, -90, -1e30, float32(math.Inf(-1)), 3.5, 3+negZero,
		3+1e-40, 13, 60, 88, 91.7, 91.72, 91.73, 92, 100, 1e30)
	for n := 1; n <= 40; n++ {
		for off := 0; off < 4; off++ {
			for lo := 0; lo < len(x); lo += n {
				xs := append(make([]float32, off), x[lo:min(lo+n, len(x))]...)[off:]
				y := make([]float32, len(xs)+off+1)[off:]
				y[len(xs)] = 42
				sum := ExpSub(xs, 3, y[:len(xs)])
				if y[len(xs)] != 42 {
					t.Fatalf("n=%d: wrote past the end", n)
				}
				var want64 float64
				for i, v := range xs {
					d := v - 3
					want := float32(math.Exp(float64(d)))
					if d < -87.33654 {
						want = low
					}
					if d > 88.73 {
						want = float32(math.Inf(1))
					}
					if u := ulps(y[i], want); u > 2 {
						t.Fatalf("n=%d off=%d: exp(%v - 3) = %v, want %v (%.1f ulp)", n, off, v, y[i], want, u)
					} else {
						worst = max(worst, u)
					}
					want64 += float64(y[i])
				}
				if want64 > math.MaxFloat32/2 { // the float32 sum may overflow
					if !(float64(sum) > math.MaxFloat32/4) {
						t.Fatalf("n=%d: sum %v, the values add up to %v", n, sum, want64)
					}
				} else if math.Abs(float64(sum)-want64) > 1e-6*want64 {
					t.Fatalf("n=%d: sum %v, the values add up to %v", n, sum, want64)
				}
			}
		}
	}
	t.Logf("%s path: largest error %.2f ulp", VecName(), worst)
	for n := 1; n <= 33; n += 16 {
		x := make([]float32, n)
		x[n-1] = float32(math.NaN())
		y := make([]float32, n)
		if s := ExpSub(x, 0, y); !math.IsNaN(float64(y[n-1])) || !math.IsNaN(float64(s)) {
			t.Errorf("n=%d: exp(NaN) = %v, sum %v", n, y[n-1], s)
		}
	}
}

// The vector bodies add in 16 lanes and reduce them the same way, so a
// softmax row of 16 or more values gets the same sum on the AVX-512 and
// AVX2 paths; here: the sum of a long row is the 16-lane sum of its vector
// part plus its tail in order, to the bit.
func TestExpSubSumsIn16Lanes(t *testing.T) {
	if VecName() == "go" {
		t.Skip("no vector body on this path")
	}
	x := make([]float32, 16*37+5)
	for i := range x {
		x[i] = -float32(i%97) / 7
	}
	y := make([]float32, len(x))
	got := ExpSub(x, 0, y)
	var lanes [16]float32
	v := len(x) &^ 15
	for i := 0; i < v; i++ {
		lanes[i%16] += y[i]
	}
	for w := 8; w >= 1; w /= 2 { // halves, then the horizontal adds' pairs
		for i := 0; i < w; i++ {
			if w >= 4 {
				lanes[i] += lanes[i+w]
			}
		}
		if w < 4 {
			break
		}
	}
	// VHADDPS twice on lanes 0-3: (l0+l1) + (l2+l3)
	s := (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
	for _, e := range y[v:] {
		s += e
	}
	if got != s {
		t.Fatalf("sum %v, the 16-lane sum %v", got, s)
	}
}

func BenchmarkExpSub(b *testing.B) {
	x := make([]float32, 1024)
	for i := range x {
		x[i] = -float32(i) / 64
	}
	y := make([]float32, len(x))
	b.Run("ExpSub/"+VecName(), func(b *testing.B) {
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
