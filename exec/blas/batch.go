package blas

// SgemmBatch computes C_i = alpha*op(A_i)*op(B_i) + beta*C_i for i < batch
// (row-major), where A_i starts at a[i*strideA], B_i at b[i*strideB] and
// C_i at c[i*strideC]: cuBLAS's strided batched GEMM. The kernel variant
// is chosen once and the products share one set of scratch buffers, so a
// batch of small products (batch_matmul, dot_interaction) costs less than
// as many Sgemm calls. Safe for concurrent use; it does not allocate in
// steady state.
func SgemmBatch(transA, transB bool, batch, m, n, k int, alpha float32, a []float32, lda, strideA int, b []float32, ldb, strideB int, beta float32, c []float32, ldc, strideC int) {
	if batch <= 0 || m == 0 || n == 0 {
		return
	}
	kn := active
	if kn == nil || k == 0 || alpha == 0 {
		for i := range batch {
			sgemmWith(kn, transA, transB, m, n, k, alpha, a[i*strideA:], lda, b[i*strideB:], ldb, beta, c[i*strideC:], ldc)
		}
		return
	}
	last := batch - 1
	checkArgs(transA, transB, m, n, k, a[last*strideA:], lda, b[last*strideB:], ldb, c[last*strideC:], ldc)
	p := planGemm(kn, transA, transB, m, n, k, lda, ldb, ldc)
	s := getScratch()
	defer putScratch(s)
	for i := range batch {
		p.run(s, alpha, a[i*strideA:], b[i*strideB:], beta, c[i*strideC:])
	}
}
