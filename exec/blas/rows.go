package blas

// Gathers and scatters of 16-wide rows (64 bytes, one cache line): the
// embedding rows a batch reads from a table at random. Each row is a cache
// miss, so on amd64 the loop prefetches the row rowAhead rows ahead of the
// one it copies, keeping many misses in flight where a plain copy loop
// waits for a few (BenchmarkGatherRows16).

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

// checkRows16 panics unless rows holds len(ids) rows and every id is a
// row of table: the assembly loops index without bounds checks.
func checkRows16(rows, table []float32, ids []int32) {
	if len(rows) < 16*len(ids) {
		panic("blas: rows too short for the ids")
	}
	n := int32(len(table) / 16)
	for _, id := range ids {
		if id < 0 || id >= n {
			panic("blas: row id out of range")
		}
	}
}

func gatherRows16Go(dst, src *float32, ids *int32, n int) {
	d, is := unsafeF32(dst, 16*n), unsafeI32(ids, n)
	for i, r := range is {
		copy(d[i*16:i*16+16], unsafeF32At(src, int(r)*16, 16))
	}
}

func scatterRows16Go(dst, src *float32, ids *int32, n int) {
	s, is := unsafeF32(src, 16*n), unsafeI32(ids, n)
	for i, r := range is {
		copy(unsafeF32At(dst, int(r)*16, 16), s[i*16:i*16+16])
	}
}
