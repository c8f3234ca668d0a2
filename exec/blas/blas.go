// Package blas holds psgraph's float32 dense kernels.
//
// Sgemm runs a packed, register-blocked GEMM with Go-assembly micro-kernels
// (AVX-512 8x32 or AVX2+FMA 6x16, chosen at run time from the CPU features).
// Without one (other architectures, the purego build tag, or an x86 CPU lacking
// AVX2/FMA) it runs a 4x4 micro-kernel in Go in the same loops. Pure-Go gonum
// serves as the reference in tests.
//
// The element-wise kernels (vec.go: relu, add, exp, sigmoid, ...) have an
// AVX-512 body (the oldest ones), an AVX2+FMA body (all) and a Go body
// (all: the whole kernel on other architectures and with the purego tag,
// the tail past the vector width elsewhere); VecName says which path runs.
package blas

import (
	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

var impl gonum.Implementation

// Sgemm computes C = alpha*op(A)*op(B) + beta*C (row-major), where op(A) is
// m x k and op(B) is k x n. beta == 0 overwrites C (NaNs in C do not propagate).
// Safe for concurrent use; it does not allocate in steady state.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemmWith(active, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SgemmSerial is Sgemm computed on the calling goroutine only: a large
// product does not share its blocks with the helper goroutines. It is for
// callers that already run about as many products at once as there are
// cores (a server's concurrent requests), where the helpers add only
// hand-offs and make each product wait for the others' cores. The result
// is Sgemm's bit for bit: every element of C is computed by the same
// kernel calls, whichever goroutine runs them.
func SgemmSerial(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	s := getScratch()
	s.serial = true
	sgemmIn(s, active, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	s.serial = false
	putScratch(s)
}

func sgemmWith(kn *kernel, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemmIn(nil, kn, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemmIn is sgemmWith with the scratch buffers s (nil: its own).
func sgemmIn(s *scratch, kn *kernel, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	if kn == nil {
		ta, tb := gblas.NoTrans, gblas.NoTrans
		if transA {
			ta = gblas.Trans
		}
		if transB {
			tb = gblas.Trans
		}
		impl.Sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	checkArgs(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	p := planGemm(kn, transA, transB, m, n, k, lda, ldb, ldc)
	p.run(s, alpha, a, b, beta, c)
}

// gemmPlan is how a product of given dimensions and layouts runs: the
// kernel variant, and whether C or Cᵀ = op(B)ᵀ op(A)ᵀ is computed.
type gemmPlan struct {
	kn             *kernel
	swap           bool
	m, n, k        int
	A, B, C        view // the layouts, without memory
	At, Bt, Ct     view
	transA, transB bool
}

// planGemm picks the kernel variant, and C or Cᵀ, by the cost model (e.g.
// n = 10 wastes 22 of 32 lanes of a wide tile).
func planGemm(kn *kernel, transA, transB bool, m, n, k, lda, ldb, ldc int) gemmPlan {
	A := view{rs: lda, cs: 1}
	if transA {
		A = view{rs: 1, cs: lda}
	}
	B := view{rs: ldb, cs: 1}
	if transB {
		B = view{rs: 1, cs: ldb}
	}
	C := view{rs: ldc, cs: 1}
	At, Bt, Ct := view{rs: B.cs, cs: B.rs}, view{rs: A.cs, cs: A.rs}, view{rs: 1, cs: ldc}
	best, swap, bc := kn, false, cost(kn, m, n, k, A, B, C)
	for v := kn; v != nil; v = v.narrow {
		if c := cost(v, m, n, k, A, B, C); c < bc {
			best, swap, bc = v, false, c
		}
		if c := cost(v, n, m, k, At, Bt, Ct); c < bc {
			best, swap, bc = v, true, c
		}
	}
	return gemmPlan{kn: best, swap: swap, m: m, n: n, k: k, A: A, B: B, C: C, At: At, Bt: Bt, Ct: Ct, transA: transA, transB: transB}
}

// run computes the planned product on a, b and c, with the scratch
// buffers s (nil: its own).
func (p *gemmPlan) run(s *scratch, alpha float32, a, b []float32, beta float32, c []float32) {
	A, B, C := p.A, p.B, p.C
	A.p, B.p, C.p = a, b, c
	m, n := p.m, p.n
	if p.swap {
		A, B, C = p.At, p.Bt, p.Ct
		A.p, B.p, C.p = b, a, c
		m, n = n, m
	}
	if s == nil {
		gemm(p.kn, m, n, p.k, alpha, A, B, beta, C)
		return
	}
	gemmIn(s, p.kn, m, n, p.k, alpha, A, B, beta, C)
}

func padded(x, r int) int { return (x + r - 1) / r * r }

func scaleC(m, n int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		if beta == 1 {
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

func checkArgs(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	switch {
	case m < 0 || n < 0 || k < 0:
		panic("blas: negative dimension")
	case lda < max(1, ac):
		panic("blas: bad lda")
	case ldb < max(1, bc):
		panic("blas: bad ldb")
	case ldc < max(1, n):
		panic("blas: bad ldc")
	case len(a) < (ar-1)*lda+ac:
		panic("blas: short A")
	case len(b) < (br-1)*ldb+bc:
		panic("blas: short B")
	case len(c) < (m-1)*ldc+n:
		panic("blas: short C")
	}
}

// Name reports the kernel in use: "avx512", "avx2" or "go".
func Name() string {
	if active == nil {
		return "gonum" // never: the Go kernel is always there
	}
	return active.name
}
