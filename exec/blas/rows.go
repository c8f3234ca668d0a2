package blas

// Gathers and scatters of table rows: the embedding rows a batch reads
// from a table at random, and the updated rows an optimizer writes back.
// Each row is a cache miss, so on amd64 the loops prefetch the row
// rowAhead rows ahead of the one they copy, keeping many misses in flight
// where a plain copy loop waits for a few (BenchmarkGatherRows16,
// BenchmarkGatherRows). 16-wide rows (64 bytes, one cache line, the
// common embedding width) have loops of their own; any other width goes
// through GatherRows and ScatterRows, which prefetch the first and the
// last byte of the row ahead (a row of up to 16 values spans at most two
// lines).

// rowAhead is how many rows ahead the amd64 loops prefetch.
const rowAhead = 16

// GatherRows16 copies rows ids of src (16 values each) into consecutive
// rows of dst. Every id must be a row of src and dst must hold len(ids)
// rows; it panics otherwise.
func GatherRows16(dst, src []float32, ids []int32) {
	checkRows16(dst, src, ids)
	if len(ids) > 0 {
		gatherRows16(&dst[0], &src[0], &ids[0], len(ids))
	}
}

// ScatterRows16 copies consecutive rows of src (16 values each) into rows
// ids of dst, the inverse of GatherRows16.
func ScatterRows16(dst, src []float32, ids []int32) {
	checkRows16(src, dst, ids)
	if len(ids) > 0 {
		scatterRows16(&dst[0], &src[0], &ids[0], len(ids))
	}
}

// GatherRows copies rows ids of src (w values each) into consecutive rows
// of dst. Every id must be a row of src and dst must hold len(ids) rows;
// it panics otherwise.
func GatherRows(dst, src []float32, ids []int32, w int) {
	if w == 16 {
		GatherRows16(dst, src, ids)
		return
	}
	checkRows(dst, src, ids, w)
	if len(ids) > 0 && w > 0 {
		gatherRowsW(&dst[0], &src[0], &ids[0], len(ids), w)
	}
}

// ScatterRows copies consecutive rows of src (w values each) into rows ids
// of dst, the inverse of GatherRows; a repeated id keeps its last row.
func ScatterRows(dst, src []float32, ids []int32, w int) {
	if w == 16 {
		ScatterRows16(dst, src, ids)
		return
	}
	checkRows(src, dst, ids, w)
	if len(ids) > 0 && w > 0 {
		scatterRowsW(&dst[0], &src[0], &ids[0], len(ids), w)
	}
}

// checkRows16 panics unless rows holds len(ids) rows and every id is a
// row of table: the assembly loops index without bounds checks.
func checkRows16(rows, table []float32, ids []int32) { checkRows(rows, table, ids, 16) }

// checkRows panics unless rows holds len(ids) rows of w values and every
// id is a row of table.
func checkRows(rows, table []float32, ids []int32, w int) {
	if w < 0 || len(rows) < w*len(ids) {
		panic("blas: rows too short for the ids")
	}
	if w == 0 {
		return
	}
	n := int32(min(len(table)/w, int(^uint32(0)>>1)))
	for _, id := range ids {
		if id < 0 || id >= n {
			panic("blas: row id out of range")
		}
	}
}
