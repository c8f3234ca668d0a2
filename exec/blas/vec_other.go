//go:build !amd64 || purego

package blas

func vecLen(int) int { return 0 }

func reluVec(x, y *float32, n int)          {}
func reluGradVec(dy, y, dx *float32, n int) {}
func addVec(x, y, z *float32, n int)        {}

func subVec(x, y, z *float32, n int)              {}
func mulVec(x, y, z *float32, n int)              {}
func sqrtVec(x, y *float32, n int)                {}
func scaleVec(a, b float32, x, y *float32, n int) {}
