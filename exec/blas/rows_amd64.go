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
