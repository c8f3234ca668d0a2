//go:build !amd64 || purego

package blas

import "unsafe"

// The row loops where there is no assembly (rows_amd64.s): plain copies,
// through the same pointer arguments the assembly takes.

func gatherRows16(dst, src *float32, ids *int32, n int) {
	d, is := unsafeF32(dst, 16*n), unsafeI32(ids, n)
	for i, r := range is {
		copy(d[i*16:i*16+16], unsafeF32At(src, int(r)*16, 16))
	}
}

func scatterRows16(dst, src *float32, ids *int32, n int) {
	s, is := unsafeF32(src, 16*n), unsafeI32(ids, n)
	for i, r := range is {
		copy(unsafeF32At(dst, int(r)*16, 16), s[i*16:i*16+16])
	}
}

func gatherRowsW(dst, src *float32, ids *int32, n, w int) {
	d, is := unsafeF32(dst, w*n), unsafeI32(ids, n)
	for i, r := range is {
		copy(d[i*w:i*w+w], unsafeF32At(src, int(r)*w, w))
	}
}

func scatterRowsW(dst, src *float32, ids *int32, n, w int) {
	s, is := unsafeF32(src, w*n), unsafeI32(ids, n)
	for i, r := range is {
		copy(unsafeF32At(dst, int(r)*w, w), s[i*w:i*w+w])
	}
}

func unsafeF32(p *float32, n int) []float32 { return unsafe.Slice(p, n) }

func unsafeI32(p *int32, n int) []int32 { return unsafe.Slice(p, n) }

// unsafeF32At is the n values from index off of the array at p.
func unsafeF32At(p *float32, off, n int) []float32 {
	return unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(p), 4*off)), n)
}

// Prefetch is a no-op here (see rows_amd64.go).
func Prefetch(uintptr) {}
