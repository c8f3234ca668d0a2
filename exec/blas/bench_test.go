package blas

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// BenchmarkSgemm runs the hot shapes on every available kernel and on gonum
// (gonum, the reference) in the same run. Shapes are op(A) m x k times op(B) k x n.
func BenchmarkSgemm(b *testing.B) {
	shapes := []struct {
		name    string
		ta, tb  bool
		m, n, k int
	}{
		{"digits_fwd1_64x64x128", false, false, 64, 128, 64},
		{"digits_fwd2_64x128x10", false, false, 64, 10, 128},
		{"digits_dW1_xT.dh", true, false, 64, 128, 64},
		{"digits_dh_dz.W2T", false, true, 64, 128, 10},
		{"digits_dW2_hT.dz", true, false, 128, 10, 64},
		{"wide_fwd1_256x64x2048", false, false, 256, 2048, 64},
		{"wide_fwd2_256x2048x10", false, false, 256, 10, 2048},
		{"wide_dW1_xT.dh", true, false, 64, 2048, 256},
		{"wide_dh_dz.W2T", false, true, 256, 2048, 10},
		{"wide_dW2_hT.dz", true, false, 2048, 10, 256},
		{"ctr_top0_fwd_256x432x128", false, false, 256, 128, 432},
		{"ctr_top0_dW_xT.dz", true, false, 432, 128, 256},
		{"ctr_top0_dx_dz.WT", false, true, 256, 432, 128},
		{"big_4096", false, false, 4096, 4096, 4096},
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, s := range shapes {
		lda, ldb := s.k, s.n
		if s.ta {
			lda = s.m
		}
		if s.tb {
			ldb = s.k
		}
		a, bm, c := randSlice(r, s.m*s.k), randSlice(r, s.k*s.n), randSlice(r, s.m*s.n)
		for _, kn := range paths() {
			if s.m*s.n*s.k > 1<<30 && testing.Short() {
				continue
			}
			b.Run(fmt.Sprintf("%s/%s", s.name, kname(kn)), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					sgemmWith(kn, s.ta, s.tb, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, s.n)
				}
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkVec runs every element-wise kernel at the digits MLP's hidden
// size (64 x 128, in L1) and the wide MLP's (256 x 2048, 2 MiB a slice),
// on the path this build and CPU select, which the name carries (run
// again with GODEBUG=cpu.avx512f=off for the AVX2 bodies on an AVX-512
// machine, cpu.avx2=off or -tags purego for the Go bodies). Reports
// nanoseconds per value and bytes moved per second.
func BenchmarkVec(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, n := range []int{64 * 128, 256 * 2048} {
		x, y, z := randSlice(r, n), randSlice(r, n), make([]float32, n)
		for _, c := range vecCases {
			if strings.Contains(c.name, "_by_") || (strings.HasPrefix(c.name, "scale_") && c.name != "scale_any") {
				continue
			}
			in := [][]float32{x, y}[:c.ins]
			b.Run(fmt.Sprintf("%s/%s/n=%d", c.name, VecName(), n), func(b *testing.B) {
				b.SetBytes(int64(4 * n * (c.ins + 1)))
				for b.Loop() {
					c.run(in, z)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/value")
			})
		}
		b.Run(fmt.Sprintf("exp_sub/%s/n=%d", VecName(), n), func(b *testing.B) {
			for i := range x {
				x[i] = -float32(i%1000) / 64
			}
			b.SetBytes(int64(8 * n))
			for b.Loop() {
				ExpSub(x, 0, z)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/value")
		})
	}
}

// BenchmarkFMAPeak is one core's float32 FMA peak on the vector path: 12
// independent chains of 8-lane fused multiply-adds (2 FMA pipes x 4
// cycles' latency need at least 8 in flight), the ceiling of every GEMM
// figure (docs/performance.md compares the wide MLP's GEMMs to it times
// the cores). It measures the clock the core actually runs at, which
// /proc/cpuinfo's figure need not be.
func BenchmarkFMAPeak(b *testing.B) {
	if _, ok := fmaPeak(1); !ok {
		b.Skip("no FMA vector path here")
	}
	const trips = 1 << 20
	b.Run(VecName(), func(b *testing.B) {
		flops := 0
		for b.Loop() {
			flops, _ = fmaPeak(trips)
		}
		b.ReportMetric(float64(flops)*trips*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}
