//go:build amd64 && !purego

package blas

// fmaPeakAVX2 runs n trips of 12 independent 8-lane fused multiply-adds
// (192 flops a trip): BenchmarkFMAPeak's measure of a core's peak.
//
//go:noescape
func fmaPeakAVX2(n int)

// fmaPeak runs the FMA loop of the best vector path (n trips of flops
// each) and reports false where there is none.
func fmaPeak(n int) (flops int, ok bool) {
	if !useAVX2 {
		return 0, false
	}
	fmaPeakAVX2(n)
	return 192, true
}
