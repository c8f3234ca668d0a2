package kernels

import (
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/blas"
)

// matmul: z = op(x) · op(y) through blas.Sgemm (blas.SgemmSerial when
// the runtime says Serial); batch_matmul: one such
// product per batch through blas.SgemmBatch.

func init() {
	register("matmul", kernelMatmul)
	register("batch_matmul", kernelBatchMatmul)
}

func kernelMatmul(k Args) (Kernel, error) {
	x, y, z := k.In[0], k.In[1], k.Out[0]
	ta, tb := k.Attrs.Bool("transpose_a"), k.Attrs.Bool("transpose_b")
	m, kk, _, n := ops.MatmulDims(x.Shape, y.Shape, ta, tb)
	lda, ldb := x.Shape[1], y.Shape[1]
	return func(rt Runtime) error {
		gemm := blas.Sgemm
		if rt.Serial() {
			gemm = blas.SgemmSerial
		}
		gemm(ta, tb, m, n, kk, 1, x.F, lda, y.F, ldb, 0, z.F, n)
		return nil
	}, nil
}

func kernelBatchMatmul(k Args) (Kernel, error) {
	x, y, z := k.In[0], k.In[1], k.Out[0]
	ta, tb := k.Attrs.Bool("transpose_a"), k.Attrs.Bool("transpose_b")
	batch := x.Shape[0]
	m, kk, _, n := ops.MatmulDims(x.Shape[1:], y.Shape[1:], ta, tb)
	lda, ldb := x.Shape[2], y.Shape[2]
	return func(Runtime) error {
		blas.SgemmBatch(ta, tb, batch, m, n, kk, 1, x.F, lda, m*kk, y.F, ldb, kk*n, 0, z.F, n, m*n)
		return nil
	}, nil
}
