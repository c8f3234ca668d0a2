package blas

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// GatherRows16 and ScatterRows16 (the assembly loops on amd64, with their
// prefetches running ahead and ending short of the ids' end) copy exactly
// the rows a plain loop copies, for any number of ids around the prefetch
// distance, repeated ids included; the Go loops of other platforms too.
func TestRows16(t *testing.T) {
	const rows = 1000
	r := rand.New(rand.NewPCG(1, 2))
	table := make([]float32, rows*16)
	for i := range table {
		table[i] = r.Float32()
	}
	for _, n := range []int{1, 2, 15, 16, 17, 33, 500} {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(r.IntN(rows))
		}
		ids[n-1] = rows - 1 // the last row
		want := make([]float32, n*16)
		for i, id := range ids {
			copy(want[i*16:], table[id*16:id*16+16])
		}
		for _, gather := range []func(dst, src *float32, ids *int32, n int){gatherRows16, gatherRows16Go} {
			got := make([]float32, n*16+16) // room after: nothing written there
			if gather(&got[0], &table[0], &ids[0], n); !slices.Equal(got[:n*16], want) || slices.ContainsFunc(got[n*16:], func(v float32) bool { return v != 0 }) {
				t.Fatalf("gather of %d rows differs from the plain loop", n)
			}
		}
		GatherRows16(make([]float32, n*16), table, ids)
		for _, scatter := range []func(dst, src *float32, ids *int32, n int){scatterRows16, scatterRows16Go} {
			dst := slices.Clone(table)
			wantDst := slices.Clone(table)
			src := make([]float32, n*16)
			for i := range src {
				src[i] = -float32(i)
			}
			for i, id := range ids { // later rows of a repeated id win
				copy(wantDst[id*16:id*16+16], src[i*16:i*16+16])
			}
			if scatter(&dst[0], &src[0], &ids[0], n); !slices.Equal(dst, wantDst) {
				t.Fatalf("scatter of %d rows differs from the plain loop", n)
			}
		}
	}
	for _, bad := range [][]int32{{-1}, {rows}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("GatherRows16 with id %d of %d rows did not panic", bad[0], rows)
				}
			}()
			GatherRows16(make([]float32, 16), table, bad)
		}()
	}
}

// BenchmarkGatherRows16 gathers 6,656 rows (a CTR batch: 256 rows of 26
// ids) at random from a 10,000,000 x 16 table (640 MB), against the plain
// copy loop.
func BenchmarkGatherRows16(b *testing.B) {
	table := make([]float32, 10000000*16)
	for i := range table {
		table[i] = 1
	}
	ids := make([]int32, 6656)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range ids {
		ids[i] = int32(r.IntN(10000000))
	}
	dst := make([]float32, len(ids)*16)
	for _, c := range []struct {
		name   string
		gather func()
	}{
		{"prefetch", func() { GatherRows16(dst, table, ids) }},
		{"copy", func() {
			for i, id := range ids {
				copy(dst[i*16:i*16+16], table[int(id)*16:int(id)*16+16])
			}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				c.gather()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids)), "ns/row")
		})
	}
}
