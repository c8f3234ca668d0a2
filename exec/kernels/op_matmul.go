package kernels

import (
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/blas"
)

// matmul: z = op(x) · op(y) through blas.Sgemm.

func init() {
	register("matmul", kernelMatmul)
}

func kernelMatmul(k Args) (Kernel, error) {
	x, y, z := k.In[0], k.In[1], k.Out[0]
	ta, tb := k.Attrs.Bool("transpose_a"), k.Attrs.Bool("transpose_b")
	m, kk, _, n := ops.MatmulDims(x.Shape, y.Shape, ta, tb)
	lda, ldb := x.Shape[1], y.Shape[1]
	return func(Runtime) error {
		blas.Sgemm(ta, tb, m, n, kk, 1, x.F, lda, y.F, ldb, 0, z.F, n)
		return nil
	}, nil
}
