//go:build !amd64 || purego

package blas

// platformKernels: no assembly micro-kernels here; Sgemm runs the Go one.
func platformKernels() []*kernel { return nil }
