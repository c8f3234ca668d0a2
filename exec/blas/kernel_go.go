package blas

import "unsafe"

// goKernel is the GEMM micro-kernel in Go, for every platform: the one
// Sgemm runs without an assembly kernel (other architectures, the purego
// build tag, an x86 CPU without AVX2 and FMA), inside the same packed,
// blocked and parallel loops as the assembly ones, so that it allocates
// nothing either (gonum's Sgemm, which it replaces there, allocated per
// call; gonum remains the tests' reference). A 4x4 tile: its 16
// accumulators spill on x86 (15 float registers for Go), yet it ran
// 5.1 GFLOP/s on one core here against 3.4 for a 2x4 tile and 4.2 for a
// 4x2 one whose accumulators fit (L1-resident operands, best of 2,000
// runs); arm64 has 32 registers.
var goKernel = &kernel{name: "go", mr: 4, nr: 4, lanes: 2, fn: sgemmGo4x4}

func init() {
	kernels = append(platformKernels(), goKernel)
	active = kernels[0]
}

// sgemmGo4x4 computes a 4x4 tile, sgemmAVX2's contract: C = alpha*A*B +
// beta*C, A(i, p) = a[i*ars+p*aks], B(p, j) = b[p*bstride+j], C's rows ldc
// apart; beta == 0 overwrites C without reading it.
func sgemmGo4x4(k int, a *float32, ars, aks int, b *float32, bstride int, c *float32, ldc int, alpha, beta float32) {
	var c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33 float32
	if k > 0 {
		A := unsafe.Slice(a, 3*ars+(k-1)*aks+1)
		B := unsafe.Slice(b, (k-1)*bstride+4)
		for p, ia, ib := 0, 0, 0; p < k; p, ia, ib = p+1, ia+aks, ib+bstride {
			bb := B[ib : ib+4 : ib+4]
			b0, b1, b2, b3 := bb[0], bb[1], bb[2], bb[3]
			a := A[ia]
			c00 += a * b0
			c01 += a * b1
			c02 += a * b2
			c03 += a * b3
			a = A[ia+ars]
			c10 += a * b0
			c11 += a * b1
			c12 += a * b2
			c13 += a * b3
			a = A[ia+2*ars]
			c20 += a * b0
			c21 += a * b1
			c22 += a * b2
			c23 += a * b3
			a = A[ia+3*ars]
			c30 += a * b0
			c31 += a * b1
			c32 += a * b2
			c33 += a * b3
		}
	}
	C := unsafe.Slice(c, 3*ldc+4)
	storeRow4(C[0:], c00, c01, c02, c03, alpha, beta)
	storeRow4(C[ldc:], c10, c11, c12, c13, alpha, beta)
	storeRow4(C[2*ldc:], c20, c21, c22, c23, alpha, beta)
	storeRow4(C[3*ldc:], c30, c31, c32, c33, alpha, beta)
}

// storeRow4 sets row[:4] = alpha*v + beta*row (beta == 0: alpha*v).
func storeRow4(row []float32, v0, v1, v2, v3, alpha, beta float32) {
	row = row[:4:4]
	if beta == 0 {
		row[0], row[1], row[2], row[3] = alpha*v0, alpha*v1, alpha*v2, alpha*v3
		return
	}
	row[0], row[1], row[2], row[3] = alpha*v0+beta*row[0], alpha*v1+beta*row[1], alpha*v2+beta*row[2], alpha*v3+beta*row[3]
}
