package blas

import "unsafe"

func unsafeF32(p *float32, n int) []float32 { return unsafe.Slice(p, n) }

func unsafeI32(p *int32, n int) []int32 { return unsafe.Slice(p, n) }

// unsafeF32At is the n values from index off of the array at p.
func unsafeF32At(p *float32, off, n int) []float32 {
	return unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(p), 4*off)), n)
}
