//go:build !amd64 || purego

package blas

func expSubVec(x *float32, m float32, y *float32, n int) float32 { return 0 }
