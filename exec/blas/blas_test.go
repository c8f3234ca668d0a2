package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// paths lists every kernel this machine can run, the Go one included, and
// gonum, the reference (nil).
func paths() []*kernel { return append(append([]*kernel{}, kernels...), nil) }

func kname(kn *kernel) string {
	if kn == nil {
		return "gonum"
	}
	return kn.name
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = r.Float32()*2 - 1
	}
	return s
}

type gemmCase struct {
	ta, tb           bool
	m, n, k          int
	alpha, beta      float32
	padA, padB, padC int
}

// checkCase runs kn and a float64 reference on the same inputs. The bound is
// relative to Σ|alpha·a·b| + |beta·c| per element, so it is independent of
// cancellation and of the accumulation order.
func checkCase(t *testing.T, r *rand.Rand, kn *kernel, tc gemmCase) {
	t.Helper()
	ar, ac := tc.m, tc.k
	if tc.ta {
		ar, ac = tc.k, tc.m
	}
	br, bc := tc.k, tc.n
	if tc.tb {
		br, bc = tc.n, tc.k
	}
	lda, ldb, ldc := ac+tc.padA, bc+tc.padB, tc.n+tc.padC
	a := randSlice(r, max(0, (ar-1)*lda+ac))
	b := randSlice(r, max(0, (br-1)*ldb+bc))
	c := randSlice(r, max(0, (tc.m-1)*ldc+tc.n))
	if tc.beta == 0 {
		for i := range c {
			c[i] = float32(math.NaN())
		}
	}
	orig := append([]float32(nil), c...)
	sgemmWith(kn, tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
	// The reference in float64 from copies of op(A) by rows and op(B) by
	// columns, each dot product over two contiguous rows (closures
	// indexing A and B in the inner loop took 95% of TestSgemmBlocks).
	ra := byRows(a, lda, tc.m, tc.k, tc.ta)  // op(A)[i, p] at i*k+p
	cb := byRows(b, ldb, tc.n, tc.k, !tc.tb) // op(B)[p, j] at j*k+p
	tol := 8 * float64(tc.k+2) * (1.0 / (1 << 24))
	for i := 0; i < tc.m; i++ {
		ai := ra[i*tc.k : i*tc.k+tc.k]
		for j := 0; j < tc.n; j++ {
			bj := cb[j*tc.k : j*tc.k+tc.k]
			var s, mag float64
			for p, x := range ai {
				prod := x * bj[p]
				s += prod
				mag += math.Abs(prod)
			}
			want := float64(tc.alpha) * s
			mag *= math.Abs(float64(tc.alpha))
			if tc.beta != 0 {
				want += float64(tc.beta) * float64(orig[i*ldc+j])
				mag += math.Abs(float64(tc.beta) * float64(orig[i*ldc+j]))
			}
			got := float64(c[i*ldc+j])
			if math.IsNaN(got) || math.Abs(got-want) > tol*(mag+1e-30) {
				t.Fatalf("%s %+v: C[%d,%d] = %v, want %v (mag %v)", kname(kn), tc, i, j, got, want, mag)
			}
		}
		// Padding columns of C must be untouched.
		for j := tc.n; j < ldc && i < tc.m-1; j++ {
			if g, o := c[i*ldc+j], orig[i*ldc+j]; g != o && !(math.IsNaN(float64(g)) && math.IsNaN(float64(o))) {
				t.Fatalf("%s %+v: padding C[%d,%d] changed", kname(kn), tc, i, j)
			}
		}
	}
}

func TestSgemmShapes(t *testing.T) {
	dims := []int{1, 2, 3, 5, 7, 8, 10, 16, 17, 31, 32, 33, 64, 97}
	r := rand.New(rand.NewPCG(1, 2))
	for _, kn := range paths() {
		t.Run(kname(kn), func(t *testing.T) {
			for _, m := range dims {
				for _, n := range dims {
					for _, k := range []int{1, 3, 17, 64} {
						for tr := 0; tr < 4; tr++ {
							tc := gemmCase{ta: tr&1 != 0, tb: tr&2 != 0, m: m, n: n, k: k, alpha: 1, beta: 0}
							checkCase(t, r, kn, tc)
						}
					}
				}
			}
		})
	}
}

func TestSgemmRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	alphas := []float32{1, -0.5, 2.25}
	betas := []float32{0, 1, -0.75}
	iters := 400
	if testing.Short() {
		iters = 60
	}
	for _, kn := range paths() {
		t.Run(kname(kn), func(t *testing.T) {
			for it := 0; it < iters; it++ {
				dim := func() int {
					if r.IntN(8) == 0 {
						return 1 + r.IntN(600) // beyond kc and mc blocks
					}
					return 1 + r.IntN(70)
				}
				tc := gemmCase{ta: r.IntN(2) == 0, tb: r.IntN(2) == 0, m: dim(), n: dim(), k: dim(),
					alpha: alphas[r.IntN(3)], beta: betas[r.IntN(3)],
					padA: r.IntN(3) * r.IntN(9), padB: r.IntN(3) * r.IntN(9), padC: r.IntN(3) * r.IntN(9)}
				checkCase(t, r, kn, tc)
			}
		})
	}
}

// TestSgemmBlocks crosses every blocking boundary, including the parallel path.
func TestSgemmBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	shapes := [][3]int{{mcBlock + 5, 2*ncBlock/16 + 3, kcBlock + 1}, {2*mcBlock + 1, 67, 2*kcBlock + 3}, {70, 9, 4*kcBlock + 5}, {300, ncBlock + 33, 40}, {257, 259, 263}}
	if testing.Short() {
		shapes = shapes[1:2]
	}
	for _, kn := range kernels {
		for _, s := range shapes {
			for tr := 0; tr < 4; tr++ {
				checkCase(t, r, kn, gemmCase{ta: tr&1 != 0, tb: tr&2 != 0, m: s[0], n: s[1], k: s[2], alpha: 1.5, beta: 0.5, padC: 3, padA: 1})
			}
		}
	}
}

func TestSgemmDegenerate(t *testing.T) {
	for _, kn := range paths() {
		c := []float32{float32(math.NaN()), 2, 3, 4}
		sgemmWith(kn, false, false, 2, 2, 0, 1, nil, 1, nil, 2, 0, c, 2)
		if c[0] != 0 || c[3] != 0 {
			t.Fatalf("%s: k=0, beta=0 gave %v", kname(kn), c)
		}
		c = []float32{1, 2, 3, 4}
		a := []float32{float32(math.NaN()), 1, 1, 1}
		sgemmWith(kn, false, false, 2, 2, 2, 0, a, 2, a, 2, 2, c, 2)
		if c[0] != 2 || c[3] != 8 {
			t.Fatalf("%s: alpha=0 gave %v", kname(kn), c)
		}
	}
}

func TestName(t *testing.T) {
	if n := Name(); n != kname(active) {
		t.Fatalf("Name() = %q", n)
	}
	t.Logf("kernel: %s (available: %d)", Name(), len(kernels))
}

func TestSgemmAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	// Every packed kernel, the Go ones included, allocates nothing (gonum,
	// the tests' reference, spawns goroutines for large products).
	for _, kn := range paths() {
		if kn == nil {
			continue
		}
		for _, s := range [][3]int{{64, 128, 64}, {64, 10, 128}, {128, 10, 64}, {5, 7, 3}, {256, 256, 64}, {256, 2048, 64}, {400, 300, 300}} {
			if kn == goKernel && s[0]*s[1]*s[2] > 1<<22 {
				continue // seconds for the scalar kernel; 256x256x64 runs its parallel path
			}
			a, b, c := randSlice(r, s[0]*s[2]), randSlice(r, s[2]*s[1]), randSlice(r, s[0]*s[1])
			for tr := 0; tr < 4; tr++ {
				ta, tb := tr&1 != 0, tr&2 != 0
				lda, ldb := s[2], s[1]
				if ta {
					lda = s[0]
				}
				if tb {
					ldb = s[2]
				}
				f := func() { sgemmWith(kn, ta, tb, s[0], s[1], s[2], 1, a, lda, b, ldb, 0, c, s[1]) }
				f()
				if n := testing.AllocsPerRun(20, f); n != 0 {
					t.Errorf("%s %v ta=%v tb=%v: %v allocs per call", kname(kn), s, ta, tb, n)
				}
			}
		}
	}
}

func TestSgemmConcurrent(t *testing.T) {
	done := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func(g int) {
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for it := 0; it < 20; it++ {
				m, n, k := 1+r.IntN(300), 1+r.IntN(300), 1+r.IntN(300)
				if it%5 == 0 {
					m, n, k = 260, 270, 280 // parallel path
				}
				a, b, c := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
				ref := make([]float32, m*n)
				Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
				sgemmWith(nil, false, false, m, n, k, 1, a, k, b, n, 0, ref, n)
				for i := range c {
					if d := math.Abs(float64(c[i] - ref[i])); d > 1e-3 {
						done <- fmt.Errorf("goroutine %d: %d %d %d: C[%d] = %v, want %v", g, m, n, k, i, c[i], ref[i])
						return
					}
				}
			}
			done <- nil
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func FuzzSgemm(f *testing.F) {
	f.Add(uint8(3), uint8(5), uint8(7), uint8(0), uint64(1))
	f.Add(uint8(64), uint8(10), uint8(128), uint8(3), uint64(2))
	f.Fuzz(func(t *testing.T, m, n, k, flags uint8, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 10))
		tc := gemmCase{ta: flags&1 != 0, tb: flags&2 != 0, m: int(m)%90 + 1, n: int(n)%90 + 1, k: int(k)%90 + 1,
			alpha: []float32{1, -2}[flags>>2&1], beta: []float32{0, 0.5}[flags>>3&1], padC: int(flags >> 4)}
		for _, kn := range kernels {
			checkCase(t, r, kn, tc)
		}
	})
}

// TestKernelVariants drives gemm directly with every kernel and variant, in
// both the C and the Cᵀ formulation, bypassing the cost model's choice.
func TestKernelVariants(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, top := range kernels {
		for kn := top; kn != nil; kn = kn.narrow {
			for _, s := range [][3]int{{1, 1, 1}, {9, 10, 11}, {64, 10, 128}, {37, 53, 300}, {200, 17, 5}} {
				m, n, k := s[0], s[1], s[2]
				a, b := randSlice(r, m*k), randSlice(r, k*n)
				want := make([]float32, m*n)
				sgemmWith(nil, false, false, m, n, k, 1, a, k, b, n, 0, want, n)
				for _, swap := range []bool{false, true} {
					got := make([]float32, m*n)
					for i := range got {
						got[i] = float32(math.NaN())
					}
					if swap {
						gemm(kn, n, m, k, 1, view{p: b, rs: 1, cs: n}, view{p: a, rs: 1, cs: k}, 0, view{p: got, rs: 1, cs: n})
					} else {
						gemm(kn, m, n, k, 1, view{p: a, rs: k, cs: 1}, view{p: b, rs: n, cs: 1}, 0, view{p: got, rs: n, cs: 1})
					}
					for i := range got {
						if d := math.Abs(float64(got[i] - want[i])); !(d <= 1e-4*float64(k)) {
							t.Fatalf("%s nr=%d %v swap=%v: C[%d] = %v, want %v", kn.name, kn.nr, s, swap, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestSgemmPacked runs random cases with both operands fully packed (the
// path in-place reading normally bypasses).
func TestSgemmPacked(t *testing.T) {
	forcePack = true
	defer func() { forcePack = false }()
	r := rand.New(rand.NewPCG(13, 14))
	for _, kn := range kernels {
		for it := 0; it < 150; it++ {
			dim := func() int { return 1 + r.IntN([]int{20, 80, 400}[r.IntN(3)]) }
			checkCase(t, r, kn, gemmCase{ta: r.IntN(2) == 0, tb: r.IntN(2) == 0, m: dim(), n: dim(), k: dim(),
				alpha: 1.25, beta: []float32{0, 0.5}[r.IntN(2)], padA: r.IntN(4), padB: r.IntN(4), padC: r.IntN(4)})
		}
	}
}

// byRows copies the rows x rows k matrix whose element [r, p] is
// x[r*ld+p], or x[p*ld+r] when trans, into float64s by rows: row r at
// r*k.
func byRows(x []float32, ld, rows, k int, trans bool) []float64 {
	out := make([]float64, rows*k)
	for r := 0; r < rows; r++ {
		for p := 0; p < k; p++ {
			if trans {
				out[r*k+p] = float64(x[p*ld+r])
			} else {
				out[r*k+p] = float64(x[r*ld+p])
			}
		}
	}
	return out
}
