package blas

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// GatherRows16 and ScatterRows16 (the assembly loops on amd64, with their
// prefetches running ahead and ending short of the ids' end) copy exactly
// the rows a plain loop copies, for any number of ids around the prefetch
// distance, repeated ids included; on other platforms (and with -tags
// purego) the same for the Go loops of rows_other.go.
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
		got := make([]float32, n*16+16) // room after: nothing written there
		if gatherRows16(&got[0], &table[0], &ids[0], n); !slices.Equal(got[:n*16], want) || slices.ContainsFunc(got[n*16:], func(v float32) bool { return v != 0 }) {
			t.Fatalf("gather of %d rows differs from the plain loop", n)
		}
		GatherRows16(make([]float32, n*16), table, ids)
		dst := slices.Clone(table)
		wantDst := slices.Clone(table)
		src := make([]float32, n*16)
		for i := range src {
			src[i] = -float32(i)
		}
		for i, id := range ids { // later rows of a repeated id win
			copy(wantDst[id*16:id*16+16], src[i*16:i*16+16])
		}
		if scatterRows16(&dst[0], &src[0], &ids[0], n); !slices.Equal(dst, wantDst) {
			t.Fatalf("scatter of %d rows differs from the plain loop", n)
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

// GatherRows and ScatterRows of every other width (the assembly loops of
// any width on amd64: 16 bytes at a time, then 4, with two prefetches a
// row) copy exactly what a plain loop copies, for any number of ids around
// the prefetch distance, repeated ids and the table's last row included,
// write nothing past the rows they were given, and refuse an id outside
// the table.
func TestRowsOfEveryWidth(t *testing.T) {
	const rows = 300
	r := rand.New(rand.NewPCG(3, 4))
	for _, w := range []int{1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 24, 31, 32, 33, 64} {
		table := make([]float32, rows*w)
		for i := range table {
			table[i] = r.Float32() + 1
		}
		for _, n := range []int{1, 2, 15, 16, 17, 33, 500} {
			ids := make([]int32, n)
			for i := range ids {
				ids[i] = int32(r.IntN(rows))
			}
			ids[n-1] = rows - 1
			ids[0] = ids[n/2] // a repeated id
			want := make([]float32, n*w)
			for i, id := range ids {
				copy(want[i*w:], table[int(id)*w:int(id)*w+w])
			}
			got := make([]float32, n*w+w) // room after: nothing written there
			if gatherRowsW(&got[0], &table[0], &ids[0], n, w); !slices.Equal(got[:n*w], want) || slices.ContainsFunc(got[n*w:], func(v float32) bool { return v != 0 }) {
				t.Fatalf("gather of %d rows of width %d differs from the plain loop", n, w)
			}
			got = make([]float32, n*w)
			if GatherRows(got, table, ids, w); !slices.Equal(got, want) {
				t.Fatalf("GatherRows of %d rows of width %d differs from the plain loop", n, w)
			}
			src := make([]float32, n*w)
			for i := range src {
				src[i] = -float32(i) - 1
			}
			wantDst := slices.Clone(table)
			for i, id := range ids { // later rows of a repeated id win
				copy(wantDst[int(id)*w:int(id)*w+w], src[i*w:i*w+w])
			}
			dst := append(slices.Clone(table), make([]float32, w)...) // room after: nothing written there
			if scatterRowsW(&dst[0], &src[0], &ids[0], n, w); !slices.Equal(dst[:len(table)], wantDst) || slices.ContainsFunc(dst[len(table):], func(v float32) bool { return v != 0 }) {
				t.Fatalf("scatter of %d rows of width %d differs from the plain loop", n, w)
			}
			dst = slices.Clone(table)
			if ScatterRows(dst, src, ids, w); !slices.Equal(dst, wantDst) {
				t.Fatalf("ScatterRows of %d rows of width %d differs from the plain loop", n, w)
			}
		}
		for _, bad := range []int32{-1, rows} {
			for name, f := range map[string]func(){
				"GatherRows":  func() { GatherRows(make([]float32, w), table, []int32{bad}, w) },
				"ScatterRows": func() { ScatterRows(slices.Clone(table), make([]float32, w), []int32{bad}, w) },
			} {
				func() {
					defer func() {
						if recover() == nil {
							t.Errorf("%s of width %d with id %d of %d rows did not panic", name, w, bad, rows)
						}
					}()
					f()
				}()
			}
		}
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

// BenchmarkGatherRows gathers and scatters batches of 6,656 rows (256
// rows of 26 ids) at random in a table of 1.3 GB of rows 16 wide
// (GatherRows16's loops), 8 wide (the zoo's DCN-v2 and DeepFM tables) and
// 1 wide (DeepFM's first-order weights),
// against the plain copy loops. The ids differ from batch to batch (256
// batches, cycled), so their rows are not in the cache from the last
// iteration, as in training.
func BenchmarkGatherRows(b *testing.B) {
	const batches = 256
	for _, w := range []int{16, 8, 1} {
		table := make([]float32, 320000000/w*w)
		for i := range table {
			table[i] = 1
		}
		all := make([]int32, 6656*batches)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range all {
			all[i] = int32(r.IntN(len(table) / w))
		}
		var ids []int32
		rows := make([]float32, 6656*w)
		for _, c := range []struct {
			name string
			run  func()
		}{
			{"gather/prefetch", func() { GatherRows(rows, table, ids, w) }},
			{"gather/copy", func() {
				for i, id := range ids {
					copy(rows[i*w:i*w+w], table[int(id)*w:int(id)*w+w])
				}
			}},
			{"scatter/prefetch", func() { ScatterRows(table, rows, ids, w) }},
			{"scatter/copy", func() {
				for i, id := range ids {
					copy(table[int(id)*w:int(id)*w+w], rows[i*w:i*w+w])
				}
			}},
		} {
			b.Run(fmt.Sprintf("w=%d/%s", w, c.name), func(b *testing.B) {
				for k := range b.N {
					at := k % batches * 6656
					ids = all[at : at+6656]
					c.run()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*6656), "ns/row")
			})
		}
	}
}
