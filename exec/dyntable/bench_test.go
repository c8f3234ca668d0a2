package dyntable

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// The benchmarks' table: 2M live rows of dim 16 with adagrad's state (16
// floats), the shape of the targets, and batches of 256 x 26
// keys drawn from a Zipf law over the 2M keys (s = 1.05), deduplicated as
// a trainer sends them.
const (
	benchRows  = 2_000_000
	benchDim   = 16
	benchBatch = 256 * 26
)

var benchCfg = Config{Dim: benchDim, StateWidth: benchDim, Seed: 1, Init: Init{Kind: Normal, Std: 0.01}, StateInit: slices.Repeat([]float32{0.1}, benchDim)}

func benchKey(rank uint64) int64 { return int64(splitmix(rank ^ 0x5bd1e995)) }

// zipfBatches draws n batches of unique keys.
func zipfBatches(n int, imax uint64, seed uint64) [][]int64 {
	rng := rand.New(rand.NewPCG(seed, seed))
	z := rand.NewZipf(rng, 1.05, 1, imax-1)
	out := make([][]int64, n)
	for i := range out {
		seen := map[uint64]bool{}
		for range benchBatch {
			r := z.Uint64()
			if !seen[r] {
				seen[r] = true
				out[i] = append(out[i], benchKey(r))
			}
		}
	}
	return out
}

var benchShared struct {
	once      sync.Once
	tab       *Table
	heapBytes uint64 // heap the table holds
	batches   [][]int64
	uniform   [][]int64
}

// sharedTable builds the 2M-row table once for the benchmarks that only
// read and update it.
func sharedTable(b *testing.B) *Table {
	b.Helper()
	s := &benchShared
	s.once.Do(func() {
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		s.tab = fill(b, benchCfg, benchRows)
		runtime.GC()
		runtime.ReadMemStats(&m1)
		s.heapBytes = m1.HeapAlloc - m0.HeapAlloc
		s.batches = zipfBatches(64, benchRows, 7)
		rng := rand.New(rand.NewPCG(8, 8))
		for range 64 {
			ks := make([]int64, benchBatch)
			for i := range ks {
				ks[i] = benchKey(rng.Uint64N(benchRows))
			}
			slices.Sort(ks)
			s.uniform = append(s.uniform, slices.Compact(ks))
		}
	})
	return s.tab
}

// fill makes a table of cfg holding rows keys (ranks 0..rows-1), a
// batch of new keys a step, as a table grows in training; it returns the
// table at the step after the last.
func fill(b *testing.B, cfg Config, rows int) *Table {
	tab, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]int64, benchBatch)
	counts := slices.Repeat([]uint32{uint32(max(cfg.MinCount, 1))}, benchBatch)
	slots := make([]int32, benchBatch)
	step := int64(0)
	for lo := 0; lo < rows; lo += benchBatch {
		if err := tab.Advance(step); err != nil {
			b.Fatal(err)
		}
		step++
		ks := keys[:min(benchBatch, rows-lo)]
		for i := range ks {
			ks[i] = benchKey(uint64(lo + i))
		}
		if err := tab.Lookup(ks, counts, slots); err != nil {
			b.Fatal(err)
		}
	}
	if got := tab.Stats().Admitted; got != uint64(rows) {
		b.Fatalf("admitted %d rows, want %d", got, rows)
	}
	if err := tab.Advance(step); err != nil {
		b.Fatal(err)
	}
	return tab
}

func reportPerKey(b *testing.B, keys int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(keys), "ns/key")
	b.ReportMetric(float64(keys)/float64(b.N), "keys/op")
}

func reportBytes(b *testing.B, tab *Table) {
	st := tab.Stats()
	b.ReportMetric(float64(st.Bytes.Total())/float64(st.Live), "B/row")
	if benchShared.tab == tab {
		b.ReportMetric(float64(benchShared.heapBytes)/float64(st.Live), "heapB/row")
	}
	b.ReportMetric(float64(4*(tab.width))*1.3, "target-B/row")
}

// BenchmarkLookup resolves a batch of Zipf keys, all with a row, to slots
// (the serve_rows side of a step: counting the sighting, touching the
// row's last-seen step).
func BenchmarkLookup(b *testing.B) {
	tab := sharedTable(b)
	benchLookup(b, tab, benchShared.batches)
	reportBytes(b, tab)
}

// BenchmarkLookupUniform is BenchmarkLookup with uniform keys: every key
// a cache miss in the index and in the rows.
func BenchmarkLookupUniform(b *testing.B) {
	tab := sharedTable(b)
	benchLookup(b, tab, benchShared.uniform)
}

func benchLookup(b *testing.B, tab *Table, batches [][]int64) {
	slots := make([]int32, benchBatch)
	keys := 0
	b.ReportAllocs()
	clk := startCPU(b)
	for i := range b.N {
		ks := batches[i%len(batches)]
		if err := tab.Lookup(ks, nil, slots); err != nil {
			b.Fatal(err)
		}
		keys += len(ks)
	}
	clk.report(b, keys)
}

// BenchmarkPull is Lookup plus the copy of the rows' values into the
// reply (serve_rows whole).
func BenchmarkPull(b *testing.B) {
	tab := sharedTable(b)
	slots := make([]int32, benchBatch)
	dst := make([]float32, benchBatch*benchDim)
	keys := 0
	b.ReportAllocs()
	clk := startCPU(b)
	for i := range b.N {
		ks := benchShared.batches[i%len(benchShared.batches)]
		if err := tab.Pull(ks, nil, slots, dst); err != nil {
			b.Fatal(err)
		}
		keys += len(ks)
	}
	clk.report(b, keys)
}

// BenchmarkUpdate is a step's adagrad update of the batch's rows: Find,
// Gather of value and state, the update, Scatter back.
func BenchmarkUpdate(b *testing.B) {
	tab := sharedTable(b)
	slots := make([]int32, benchBatch)
	rows := make([]float32, benchBatch*2*benchDim)
	keys := 0
	b.ReportAllocs()
	clk := startCPU(b)
	for i := range b.N {
		ks := benchShared.batches[i%len(benchShared.batches)]
		tab.Find(ks, slots)
		s := slots[:len(ks)]
		r := rows[:len(ks)*2*benchDim]
		if err := tab.Gather(s, 0, 2*benchDim, r); err != nil {
			b.Fatal(err)
		}
		for k := range len(ks) {
			p, acc := r[k*2*benchDim:k*2*benchDim+benchDim], r[k*2*benchDim+benchDim:(k+1)*2*benchDim]
			for j := range p {
				g := float32(1e-3) * p[j]
				acc[j] += g * g
				p[j] -= 0.01 * g / (float32(math.Sqrt(float64(acc[j]))) + 1e-10)
			}
		}
		if err := tab.Scatter(s, 0, 2*benchDim, r); err != nil {
			b.Fatal(err)
		}
		keys += len(ks)
	}
	clk.report(b, keys)
}

// BenchmarkUpdateCols is BenchmarkUpdate the way a step's fused update
// runs it (program's dynUpdate): per chunk of 64 rows, GatherCols of
// value and state, the update, ScatterCols back.
func BenchmarkUpdateCols(b *testing.B) {
	tab := sharedTable(b)
	const chunk = 64
	slots := make([]int32, benchBatch)
	val := make([]float32, chunk*benchDim)
	acc := make([]float32, chunk*benchDim)
	cols := []Cols{{Col: 0, Width: benchDim}, {Col: benchDim, Width: benchDim}}
	keys := 0
	b.ReportAllocs()
	clk := startCPU(b)
	for i := range b.N {
		ks := benchShared.batches[i%len(benchShared.batches)]
		tab.Find(ks, slots)
		for lo := 0; lo < len(ks); lo += chunk {
			hi := min(lo+chunk, len(ks))
			s := slots[lo:hi]
			cols[0].F, cols[1].F = val[:len(s)*benchDim], acc[:len(s)*benchDim]
			if err := tab.GatherCols(s, cols); err != nil {
				b.Fatal(err)
			}
			for j, p := range cols[0].F {
				g := float32(1e-3) * p
				cols[1].F[j] += g * g
				cols[0].F[j] -= 0.01 * g / (float32(math.Sqrt(float64(cols[1].F[j]))) + 1e-10)
			}
			if err := tab.ScatterCols(s, cols); err != nil {
				b.Fatal(err)
			}
		}
		keys += len(ks)
	}
	clk.report(b, keys)
}

// BenchmarkAdmit is the steady state of a table at its capacity: 2M rows
// (LRU, ttl 1000 steps, min_count 2 with the default sketch), each
// step a batch of which a quarter are keys never seen before (half of
// those seen a second time a step later, and admitted then), so every
// step admits, evicts by capacity and reuses the evicted rows' memory;
// plus a Sweep of 64K records. Steady state allocates nothing.
func BenchmarkAdmit(b *testing.B) {
	cfg := benchCfg
	cfg.MinCount, cfg.TTL, cfg.Capacity = 2, 1000, benchRows
	tab := fill(b, cfg, benchRows)
	old := zipfBatches(64, benchRows, 9)
	slots := make([]int32, benchBatch)
	next := uint64(benchRows) // fresh ranks
	batch := make([]int64, 0, benchBatch)
	var prevNew []int64
	step := tab.Stats().Step
	run := func() int {
		step++
		if err := tab.Advance(step); err != nil {
			b.Fatal(err)
		}
		ks := old[step%int64(len(old))]
		nNew := len(ks) / 4
		batch = append(batch[:0], ks[:len(ks)-nNew]...)
		batch = append(batch, prevNew...) // their second sighting
		fresh := batch[len(batch):]
		for range nNew - len(prevNew) {
			batch = append(batch, benchKey(next))
			next++
		}
		fresh = batch[len(batch)-(nNew-len(prevNew)):]
		if err := tab.Lookup(batch, nil, slots); err != nil {
			b.Fatal(err)
		}
		prevNew = append(prevNew[:0], fresh[:len(fresh)/2]...)
		tab.Sweep(1 << 16)
		return len(batch)
	}
	for range 400 { // reach the steady state: every page and segment allocated
		run()
	}
	st0 := tab.Stats()
	keys := 0
	b.ReportAllocs()
	clk := startCPU(b)
	for range b.N {
		keys += run()
	}
	b.StopTimer()
	clk.report(b, keys)
	st := tab.Stats()
	b.ReportMetric(float64(st.Admitted-st0.Admitted)/float64(b.N), "admitted/op")
	b.ReportMetric(float64(st.EvictedCapacity-st0.EvictedCapacity)/float64(b.N), "evicted/op")
	reportBytes(b, tab)
	if st.Live > int64(cfg.Capacity) {
		b.Fatalf("%d live rows over the capacity %d", st.Live, cfg.Capacity)
	}
}

// BenchmarkSnapshotPause measures what a snapshot of the 2M-row table
// costs the lookups running beside it: one goroutine looks batches up
// without pause while the snapshot is written to a file. The metrics: the
// percentiles of the lookups' latency during the snapshot (snap-*) and
// for as long before it (base-*), and of their processor time during it
// (snap-cpu-*: the copy-on-write they do); the percentiles of the
// snapshot's holds of the table's lock, in wall time (hold-*: what a
// lookup may wait, including the times the system took the processor
// from the snapshot's thread) and in processor time (hold-cpu-*: the work
// done under the lock); the snapshot's time and size.
func BenchmarkSnapshotPause(b *testing.B) { cutPause(b, Snapshot, "snap", "snapshot") }

// BenchmarkDeltaPause is BenchmarkSnapshotPause for a delta: after a
// snapshot of the table, each of its b.N rounds looks batches up for
// 300 ms (base-*; their rows are the delta's), then writes the delta
// while the lookups go on (delta-*). A delta's writer first counts its
// rows (a pass over the table's slots, one hold of the lock per 1024)
// and then walks them, skipping the slots not written since the last
// cut: its holds are short and close together.
func BenchmarkDeltaPause(b *testing.B) {
	tab := sharedTable(b)
	f, err := os.Create(filepath.Join(b.TempDir(), "base.safetensors"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	c, err := tab.Cut(Snapshot)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.WriteSafetensors(f, "emb", Checkpoint); err != nil {
		b.Fatal(err)
	}
	if err := c.Commit(); err != nil {
		b.Fatal(err)
	}
	cutPause(b, Delta, "delta", "delta")
}

// cutPause measures the lookups beside cuts of kind, naming the metrics
// of the time during the cut with prefix (and its time and size with
// name).
func cutPause(b *testing.B, kind Kind, prefix, name string) {
	tab := sharedTable(b)
	path := filepath.Join(b.TempDir(), "snap.safetensors")
	var cpu, baseCPU, snapCPU []time.Duration // the lookups' processor time
	measure := func(during func()) []time.Duration {
		var lat []time.Duration
		cpu = cpu[:0]
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			slots := make([]int32, benchBatch)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				t0, c0 := time.Now(), threadCPU()
				if err := tab.Lookup(benchShared.batches[i%len(benchShared.batches)], nil, slots); err != nil {
					panic(err)
				}
				lat = append(lat, time.Since(t0))
				cpu = append(cpu, threadCPU()-c0)
			}
		}()
		during()
		close(stop)
		<-done
		return lat
	}
	var base, snap []time.Duration
	holds, holdsCPU := make([]time.Duration, 0, 1<<14), make([]time.Duration, 0, 1<<14)
	var size int64
	var took time.Duration
	b.ResetTimer()
	for range b.N {
		base = append(base, measure(func() {
			t0 := time.Now()
			for time.Since(t0) < 300*time.Millisecond {
				runtime.Gosched()
			}
		})...)
		baseCPU = append(baseCPU, cpu...)
		snap = append(snap, measure(func() {
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			c, err := tab.Cut(kind)
			if err != nil {
				b.Fatal(err)
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var c0 time.Duration
			var w0 time.Time
			c.holding = func(taken bool) {
				if taken {
					c0, w0 = threadCPU(), time.Now()
				} else {
					holdsCPU = append(holdsCPU, threadCPU()-c0)
					holds = append(holds, time.Since(w0))
				}
			}
			if size, err = c.WriteSafetensors(f, "emb", Checkpoint); err != nil {
				b.Fatal(err)
			}
			if err := c.Commit(); err != nil {
				b.Fatal(err)
			}
			took = time.Since(t0)
			f.Close()
		})...)
		snapCPU = append(snapCPU, cpu...)
	}
	b.StopTimer()
	pct := func(lat []time.Duration, p float64) float64 {
		slices.Sort(lat)
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e6
	}
	b.ReportMetric(pct(base, 0.5), "base-p50-ms")
	b.ReportMetric(pct(base, 0.99), "base-p99-ms")
	b.ReportMetric(pct(base, 1), "base-max-ms")
	b.ReportMetric(pct(snap, 0.5), prefix+"-p50-ms")
	b.ReportMetric(pct(snap, 0.99), prefix+"-p99-ms")
	b.ReportMetric(pct(snap, 1), prefix+"-max-ms")
	b.ReportMetric(pct(baseCPU, 0.5), "base-cpu-p50-ms")
	b.ReportMetric(pct(baseCPU, 1), "base-cpu-max-ms")
	b.ReportMetric(pct(snapCPU, 0.5), prefix+"-cpu-p50-ms")
	b.ReportMetric(pct(snapCPU, 1), prefix+"-cpu-max-ms")
	b.ReportMetric(pct(holds, 0.5), "hold-p50-ms")
	b.ReportMetric(pct(holds, 0.99), "hold-p99-ms")
	b.ReportMetric(pct(holds, 1), "hold-max-ms")
	b.ReportMetric(pct(holdsCPU, 0.5), "hold-cpu-p50-ms")
	b.ReportMetric(pct(holdsCPU, 0.99), "hold-cpu-p99-ms")
	b.ReportMetric(pct(holdsCPU, 1), "hold-cpu-max-ms")
	b.ReportMetric(took.Seconds(), name+"-s")
	b.ReportMetric(float64(size)/(1<<20), name+"-MiB")
	b.ReportMetric(float64(len(snap)), "lookups-during")
}

// BenchmarkSweep frees expired rows of a table that held 2M rows, 65536
// records a call: the table is filled over 300 steps with a ttl of 300,
// then advanced 150 steps, so that half of its rows expire at once. The
// metrics are over the calls that found rows to free (a full pass over
// the table; later calls return at once).
func BenchmarkSweep(b *testing.B) {
	cfg := benchCfg
	cfg.TTL = 300
	tab := fill(b, cfg, benchRows)
	if err := tab.Advance(tab.Stats().Step + 150); err != nil {
		b.Fatal(err)
	}
	freed, calls := 0, 0
	var busy time.Duration
	startCPU(b)
	for range b.N {
		c0 := threadCPU()
		n := tab.Sweep(1 << 16)
		if n > 0 {
			busy += threadCPU() - c0
			freed += n
			calls++
		}
	}
	b.StopTimer()
	if calls == 0 {
		return
	}
	b.ReportMetric(float64(busy.Microseconds())/1000/float64(calls), "cpu-ms/call")
	b.ReportMetric(float64(freed)/float64(calls), "freed/call")
	b.ReportMetric(float64(busy.Nanoseconds())/float64(freed), "cpu-ns/freed")
}

// BenchmarkSegmentSplit splits a full index segment: the most work one
// insertion ever does in the index.
func BenchmarkSegmentSplit(b *testing.B) {
	r := newRows(1)
	keys := make([]int64, segMax)
	for i := range keys {
		keys[i] = int64(i)
		s, _ := r.alloc()
		r.rec(s)[0] = uint64(i)
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		x := newIndex()
		for i, k := range keys {
			x.dir[0].put(uint32(indexHash(k)>>32), int32(i))
		}
		b.StartTimer()
		x.split(x.dir[0], 0)
	}
}
