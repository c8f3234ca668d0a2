package blas

import (
	"math/rand/v2"
	"runtime"
	"testing"
)

// SgemmSerial computes a product large enough for the helper goroutines
// (the CTR example's top layer for 100 rows: 100x432 by 432x128, and its
// transposes) on the calling goroutine, and its C is Sgemm's bit for bit,
// with beta 0 and 0.5; both are within rounding of gonum's.
func TestSgemmSerialEqualsSgemm(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	if active == nil || helpers() == 0 {
		t.Skip("no assembly or Go kernel, or the helpers were started on one core")
	}
	r := rand.New(rand.NewPCG(3, 4))
	m, n, k := 100, 128, 432
	a, b := make([]float32, m*k), make([]float32, k*n)
	for i := range a {
		a[i] = float32(r.NormFloat64())
	}
	for i := range b {
		b[i] = float32(r.NormFloat64())
	}
	c0 := make([]float32, m*n)
	for i := range c0 {
		c0[i] = float32(r.NormFloat64())
	}
	for _, tc := range []struct {
		ta, tb bool
		beta   float32
	}{{false, false, 0}, {false, false, 0.5}, {true, false, 0}, {false, true, 0.5}, {true, true, 0}} {
		lda, ldb := k, n
		if tc.ta {
			lda = m
		}
		if tc.tb {
			ldb = k
		}
		par, ser, ref := append([]float32(nil), c0...), append([]float32(nil), c0...), append([]float32(nil), c0...)
		before := SharedBlocks()
		Sgemm(tc.ta, tc.tb, m, n, k, 1, a, lda, b, ldb, tc.beta, par, n)
		if SharedBlocks() == before {
			t.Fatalf("ta=%v tb=%v: Sgemm of %dx%dx%d shared no block with the helpers", tc.ta, tc.tb, m, n, k)
		}
		before = SharedBlocks()
		SgemmSerial(tc.ta, tc.tb, m, n, k, 1, a, lda, b, ldb, tc.beta, ser, n)
		if d := SharedBlocks() - before; d != 0 {
			t.Fatalf("ta=%v tb=%v: SgemmSerial shared %d blocks with the helpers", tc.ta, tc.tb, d)
		}
		sgemmWith(nil, tc.ta, tc.tb, m, n, k, 1, a, lda, b, ldb, tc.beta, ref, n)
		for i := range par {
			if ser[i] != par[i] {
				t.Fatalf("ta=%v tb=%v beta=%v: C[%d] = %v serial, %v shared", tc.ta, tc.tb, tc.beta, i, ser[i], par[i])
			}
			if d := ser[i] - ref[i]; d > 1e-3 || d < -1e-3 {
				t.Fatalf("ta=%v tb=%v beta=%v: C[%d] = %v, gonum %v", tc.ta, tc.tb, tc.beta, i, ser[i], ref[i])
			}
		}
	}
}
