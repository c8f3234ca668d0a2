package kernels

import "github.com/psgraph/psgraph/exec/blas"

// Row copies between a table and the rows of a batch, the inner loops of
// lookup_table, gather_rows and the scatter of updated rows. A table's
// rows are read at random, one cache miss each; blas's loops prefetch the
// rows ahead (BenchmarkGatherRows: 2x faster gathers of 8-wide rows than a
// plain copy loop).

// gatherRows copies rows ids of src (w values each) into consecutive rows
// of dst.
func gatherRows(dst, src []float32, ids []int32, w int) { blas.GatherRows(dst, src, ids, w) }

// scatterRows copies consecutive rows of src (w values each) into rows ids
// of dst.
func scatterRows(dst, src []float32, ids []int32, w int) { blas.ScatterRows(dst, src, ids, w) }
