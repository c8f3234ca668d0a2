// Package blas holds psgraph's float32 dense kernels.
//
// Sgemm runs a packed, register-blocked GEMM with Go-assembly micro-kernels
// (AVX-512 8x32 or AVX2+FMA 6x16, chosen at run time from the CPU features).
// Without one (other architectures, the purego build tag, or an x86 CPU lacking
// AVX2/FMA) it falls back to pure-Go gonum, which also serves as the reference
// in tests.
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

func sgemmWith(kn *kernel, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
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
	A := view{p: a, rs: lda, cs: 1}
	if transA {
		A = view{p: a, rs: 1, cs: lda}
	}
	B := view{p: b, rs: ldb, cs: 1}
	if transB {
		B = view{p: b, rs: 1, cs: ldb}
	}
	C := view{p: c, rs: ldc, cs: 1}
	// Pick the kernel variant, and C or Cᵀ = op(B)ᵀ op(A)ᵀ, by the cost model
	// (e.g. n = 10 wastes 22 of 32 lanes of a wide tile).
	At, Bt, Ct := view{p: b, rs: B.cs, cs: B.rs}, view{p: a, rs: A.cs, cs: A.rs}, view{p: c, rs: 1, cs: ldc}
	best, swap, bc := kn, false, cost(kn, m, n, k, A, B, C)
	for v := kn; v != nil; v = v.narrow {
		if c := cost(v, m, n, k, A, B, C); c < bc {
			best, swap, bc = v, false, c
		}
		if c := cost(v, n, m, k, At, Bt, Ct); c < bc {
			best, swap, bc = v, true, c
		}
	}
	if swap {
		gemm(best, n, m, k, alpha, At, Bt, beta, Ct)
		return
	}
	gemm(best, m, n, k, alpha, A, B, beta, C)
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

// Name reports the kernel in use: "avx512", "avx2" or "generic" (gonum).
func Name() string {
	if active == nil {
		return "generic"
	}
	return active.name
}
