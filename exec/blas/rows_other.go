//go:build !amd64 || purego

package blas

func gatherRows16(dst, src *float32, ids *int32, n int)  { gatherRows16Go(dst, src, ids, n) }
func scatterRows16(dst, src *float32, ids *int32, n int) { scatterRows16Go(dst, src, ids, n) }
func gatherRowsW(dst, src *float32, ids *int32, n, w int) {
	gatherRowsWGo(dst, src, ids, n, w)
}
func scatterRowsW(dst, src *float32, ids *int32, n, w int) {
	scatterRowsWGo(dst, src, ids, n, w)
}

// Prefetch is a no-op here (see rows_amd64.go).
func Prefetch(uintptr) {}
