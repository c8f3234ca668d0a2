package blas

import (
	"math"
	"math/rand/v2"
	"testing"
)

// SgemmBatch computes each product of the batch as a float64 reference
// does, for every transpose, small and DLRM-shaped products (one kernel
// plan for all of them), with gaps between the matrices that it must
// leave untouched; and it does not allocate.
func TestSgemmBatch(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 3))
	for _, d := range [][3]int{{4, 2, 5}, {27, 27, 16}, {27, 16, 27}, {1, 9, 3}, {33, 40, 17}} {
		m, n, k := d[0], d[1], d[2]
		for tr := range 4 {
			ta, tb := tr&1 != 0, tr&2 != 0
			const batch, gap = 5, 3
			lda, ldb := k, n
			if ta {
				lda = m
			}
			if tb {
				ldb = k
			}
			sa, sb, sc := m*k+gap, k*n+gap, m*n+gap
			a, b := randSlice(r, batch*sa), randSlice(r, batch*sb)
			c := randSlice(r, batch*sc)
			orig := append([]float32(nil), c...)
			SgemmBatch(ta, tb, batch, m, n, k, 1.5, a, lda, sa, b, ldb, sb, 0.5, c, n, sc)
			tol := 8 * float64(k+2) / (1 << 24)
			for q := range batch {
				A, B := a[q*sa:], b[q*sb:]
				for i := range m {
					for j := range n {
						var s, mag float64
						for p := range k {
							ai, bi := i*lda+p, p*ldb+j
							if ta {
								ai = p*lda + i
							}
							if tb {
								bi = j*ldb + p
							}
							av, bv := float64(A[ai]), float64(B[bi])
							s += av * bv
							mag += math.Abs(av * bv)
						}
						o := float64(orig[q*sc+i*n+j])
						want := 1.5*s + 0.5*o
						if got := float64(c[q*sc+i*n+j]); math.Abs(got-want) > tol*(1.5*mag+0.5*math.Abs(o)+1e-30) {
							t.Fatalf("%v ta=%v tb=%v: C_%d[%d,%d] = %v, want %v", d, ta, tb, q, i, j, got, want)
						}
					}
				}
				for g := m * n; g < sc; g++ {
					if c[q*sc+g] != orig[q*sc+g] {
						t.Fatalf("%v ta=%v tb=%v: the gap after C_%d changed", d, ta, tb, q)
					}
				}
			}
			if active != nil {
				f := func() { SgemmBatch(ta, tb, batch, m, n, k, 1, a, lda, sa, b, ldb, sb, 0, c, n, sc) }
				if allocs := testing.AllocsPerRun(10, f); allocs != 0 {
					t.Errorf("%v ta=%v tb=%v: %v allocs per call", d, ta, tb, allocs)
				}
			}
		}
	}
}
