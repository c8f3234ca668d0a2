//go:build amd64 && !purego

package blas

//go:noescape
func gatherRows16(dst, src *float32, ids *int32, n int)

//go:noescape
func scatterRows16(dst, src *float32, ids *int32, n int)

//go:noescape
func gatherRowsW(dst, src *float32, ids *int32, n, w int)

//go:noescape
func scatterRowsW(dst, src *float32, ids *int32, n, w int)

// Prefetch asks the processor to bring the cache line at address p into
// its caches and returns without waiting for it (PREFETCHT0 on amd64;
// nothing elsewhere or with the purego tag). It is a hint: p need not be
// a valid address. A loop over records at random places issues the
// prefetches of a group first, so their misses overlap, then reads them
// (dyntable's lookups).
//
//go:noescape
func Prefetch(p uintptr)
