//go:build amd64 && !purego

package blas

import "golang.org/x/sys/cpu"

//go:generate python3 gen_kernels.py

// sgemmAVX512 computes an 8x32 tile: C = alpha*A*B + beta*C, where A(i, p) is
// a[i*ars+p*aks] (so packed panels, transposed and plain row-major A are all
// read directly), B(p, j) is b[p*bstride+j] and C rows are ldc floats apart.
// beta == 0 overwrites C without reading it.
//
//go:noescape
func sgemmAVX512(k int, a *float32, ars, aks int, b *float32, bstride int, c *float32, ldc int, alpha, beta float32)

// sgemmAVX512n16 is the 8x16 variant of sgemmAVX512 for narrow C (n <= 16).
//
//go:noescape
func sgemmAVX512n16(k int, a *float32, ars, aks int, b *float32, bstride int, c *float32, ldc int, alpha, beta float32)

// sgemmAVX2 is the 6x16 AVX2+FMA analogue of sgemmAVX512.
//
//go:noescape
func sgemmAVX2(k int, a *float32, ars, aks int, b *float32, bstride int, c *float32, ldc int, alpha, beta float32)

// platformKernels lists the assembly micro-kernels this CPU runs, best
// first.
func platformKernels() []*kernel {
	var ks []*kernel
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL {
		ks = append(ks, &kernel{name: "avx512", mr: 8, nr: 32, lanes: 32, fn: sgemmAVX512,
			narrow: &kernel{name: "avx512", mr: 8, nr: 16, lanes: 32, fn: sgemmAVX512n16}})
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, &kernel{name: "avx2", mr: 6, nr: 16, lanes: 16, fn: sgemmAVX2})
	}
	return ks
}
