// Package blas holds psgraph's float32 dense kernels.
package blas

import (
	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

var impl gonum.Implementation

// Sgemm computes C = alpha*op(A)*op(B) + beta*C (row-major).
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	ta, tb := gblas.NoTrans, gblas.NoTrans
	if transA {
		ta = gblas.Trans
	}
	if transB {
		tb = gblas.Trans
	}
	if k == 0 {
		for i := 0; i < m; i++ {
			row := c[i*ldc : i*ldc+n]
			for j := range row {
				if beta == 0 {
					row[j] = 0
				} else {
					row[j] *= beta
				}
			}
		}
		return
	}
	impl.Sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Name reports the kernel in use.
func Name() string { return "generic" }
