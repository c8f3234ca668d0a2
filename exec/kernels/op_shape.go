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

func copyKernel(x, y *tensor.Tensor) Kernel {
	return func(Runtime) error {
		if y.DType == tensor.I32 {
			copy(y.I, x.I)
		} else {
			copy(y.F, x.F)
		}
		return nil
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
		clear(idx)
		n := y.Numel()
		src := 0
		for i := 0; i < n; i++ {
			if y.DType == tensor.I32 {
				y.I[i] = x.I[src]
			} else {
				y.F[i] = x.F[src]
			}
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
		return nil
	}
}
