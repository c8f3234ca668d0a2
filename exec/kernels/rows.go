package kernels

import "github.com/psgraph/psgraph/exec/blas"

// Row copies between a table and the rows of a batch, the inner loops of
// lookup_table, gather_rows and the scatter of updated rows. A table's
// rows are read at random, one cache miss each; 16-wide rows (a 64-byte
// line, the common embedding width) go through blas's loops, which
// prefetch the rows ahead.

// gatherRows copies rows ids of src (w values each) into consecutive rows
// of dst.
func gatherRows(dst, src []float32, ids []int32, w int) {
	if w == 16 {
		blas.GatherRows16(dst, src, ids)
		return
	}
	for i, r := range ids {
		copy(dst[i*w:(i+1)*w], src[int(r)*w:(int(r)+1)*w])
	}
}

// scatterRows copies consecutive rows of src (w values each) into rows ids
// of dst.
func scatterRows(dst, src []float32, ids []int32, w int) {
	if w == 16 {
		blas.ScatterRows16(dst, src, ids)
		return
	}
	for i, r := range ids {
		copy(dst[int(r)*w:(int(r)+1)*w], src[i*w:(i+1)*w])
	}
}
