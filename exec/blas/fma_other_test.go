//go:build !amd64 || purego

package blas

// fmaPeak: no FMA vector path here (BenchmarkFMAPeak skips).
func fmaPeak(n int) (flops int, ok bool) { return 0, false }
