package kernels

import (
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/tensor"
)

// reshape, reshape_like and transpose.

func init() {
	register("reshape", func(k Args) (Kernel, error) { return copyKernel(k.In[0], k.Out[0]), nil })
	register("reshape_like", func(k Args) (Kernel, error) { return copyKernel(k.In[0], k.Out[0]), nil })
	register("transpose", func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		perm, err := ops.PermOf(k.Attrs, len(x.Shape))
		if err != nil {
			return nil, err
		}
		return transposeKernel(x, y, perm), nil
	})
}

// copyKernel copies x's elements into y, whatever their dtype: reshape,
// identity (of a row-sparse value too: the rows its buffer holds).
func copyKernel(x, y *tensor.Tensor) Kernel {
	return func(Runtime) error {
		if sameValues(x, y) { // a reshape's view of its input (program's inPlace)
			return nil
		}
		copy(y.F, x.F)
		copy(y.I, x.I)
		copy(y.L, x.L)
		return nil
	}
}

// sameValues says whether y's values are x's own (a view): their
// first elements are one.
func sameValues(x, y *tensor.Tensor) bool {
	switch {
	case len(x.F) > 0 && len(y.F) > 0:
		return &x.F[0] == &y.F[0]
	case len(x.I) > 0 && len(y.I) > 0:
		return &x.I[0] == &y.I[0]
	case len(x.L) > 0 && len(y.L) > 0:
		return &x.L[0] == &y.L[0]
	}
	return false
}

// copyElems copies n elements of src from flat index s into dst from flat
// index d; both have dst's dtype. The rearranging kernels (reshape,
// identity, slice_rows, concat, stack) move float32 values, int32 ids and
// int64 keys through it alike.
func copyElems(dst *tensor.Tensor, d int, src *tensor.Tensor, s, n int) {
	switch dst.DType {
	case tensor.I32:
		copy(dst.I[d:d+n], src.I[s:s+n])
	case tensor.I64:
		copy(dst.L[d:d+n], src.L[s:s+n])
	default:
		copy(dst.F[d:d+n], src.F[s:s+n])
	}
}

// transposeKernel walks y in order, keeping the matching flat index of x.
func transposeKernel(x, y *tensor.Tensor, perm []int) Kernel {
	rank := len(perm)
	xStride := make([]int, rank)
	s := 1
	for d := rank - 1; d >= 0; d-- {
		xStride[d] = s
		s *= x.Shape[d]
	}
	// st[i]: step in x when y's axis i advances by one.
	st := make([]int, rank)
	for i, p := range perm {
		st[i] = xStride[p]
	}
	dims := y.Shape.Clone()
	idx := make([]int, rank)
	return func(Runtime) error {
		switch y.DType {
		case tensor.I32:
			transposeWalk(x.I, y.I, st, dims, idx)
		case tensor.I64:
			transposeWalk(x.L, y.L, st, dims, idx)
		default:
			transposeWalk(x.F, y.F, st, dims, idx)
		}
		return nil
	}
}

// transposeWalk fills y in order from x, stepping st[d] in x when y's
// axis d advances (idx is scratch of rank len(dims)).
func transposeWalk[T float32 | int32 | int64](x, y []T, st, dims, idx []int) {
	clear(idx)
	rank, src := len(dims), 0
	for i := range y {
		y[i] = x[src]
		for d := rank - 1; d >= 0; d-- {
			idx[d]++
			src += st[d]
			if idx[d] < dims[d] {
				break
			}
			src -= st[d] * dims[d]
			idx[d] = 0
		}
	}
}
