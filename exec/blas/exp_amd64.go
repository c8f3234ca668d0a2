//go:build amd64 && !purego

package blas

// expSubVec is ExpSub's AVX-512 body: y[i] = exp(x[i] - m) for n values,
// n a positive multiple of 16, and their sum.
//
//go:noescape
func expSubVec(x *float32, m float32, y *float32, n int) float32
