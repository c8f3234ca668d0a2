//go:build amd64 && !purego

package blas

import "golang.org/x/sys/cpu"

var hasAVX512 = cpu.X86.HasAVX512F

// vecLen is the part of n the SIMD bodies handle.
func vecLen(n int) int {
	if !hasAVX512 {
		return 0
	}
	return n &^ 15
}

//go:noescape
func reluVec(x, y *float32, n int)

//go:noescape
func reluGradVec(dy, y, dx *float32, n int)

//go:noescape
func addVec(x, y, z *float32, n int)

//go:noescape
func subVec(x, y, z *float32, n int)

//go:noescape
func mulVec(x, y, z *float32, n int)

//go:noescape
func sqrtVec(x, y *float32, n int)

//go:noescape
func scaleVec(a, b float32, x, y *float32, n int)
