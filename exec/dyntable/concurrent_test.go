package dyntable

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// Readers (Find, Gather, Read, Stats) run beside the owner and a cut's
// writer (go test -race checks their accesses), and a delta aborted while
// its writer walks gives its rows back: the next delta holds them, so the
// snapshot and that delta restore the table exactly.
func TestConcurrentReadersAndAbort(t *testing.T) {
	cfg := refConfigs[2].cfg // lru, ttl, min_count 3 with a probability
	tab, _ := New(cfg)
	tab.batch = 32
	twin, _ := New(cfg)
	wl := &workload{rng: rand.New(rand.NewPCG(21, 1)), universe: 1500, maxBatch: 80, deletes: true}
	twl := &workload{rng: rand.New(rand.NewPCG(21, 1)), universe: 1500, maxBatch: 80, deletes: true}

	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads atomic.Int64
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 5))
			keys := make([]int64, 16)
			slots := make([]int32, 16)
			buf := make([]float32, 16*tab.width)
			for !stop.Load() {
				for i := range keys {
					keys[i] = int64(rng.IntN(4000)*3) * 0x1000193
				}
				tab.Find(keys, slots)
				// A slot found by a reader may be reused by the owner before
				// Gather: a reader gets an error or some row, never a crash.
				_ = tab.Gather(slots, 0, tab.width, buf)
				if err := tab.Read(keys, buf[:16*tab.dim]); err != nil {
					t.Error(err)
					return
				}
				if s := tab.Stats(); s.Live > s.Held {
					t.Errorf("%d live rows of %d held", s.Live, s.Held)
					return
				}
				reads.Add(1)
			}
		}()
	}
	var snap, delta *memFile
	for step := int64(0); step <= 120; step++ {
		if err := wl.step(tab, nil, step); err != nil {
			t.Fatal(err)
		}
		if err := twl.step(twin, nil, step); err != nil {
			t.Fatal(err)
		}
		switch step {
		case 50:
			snap = writeCut(t, tab, Snapshot, Checkpoint)
		case 80:
			c, err := tab.Cut(Delta)
			if err != nil {
				t.Fatal(err)
			}
			started := make(chan struct{})
			done := make(chan error)
			f := &memFile{}
			var once sync.Once
			f.onWrite = func() { once.Do(func() { close(started) }) }
			go func() {
				_, err := c.WriteSafetensors(f, "emb", Checkpoint)
				done <- err
			}()
			<-started // the writer wrote its header: the walk is on
			c.Abort()
			if err := <-done; err != nil && !errors.Is(err, errAborted) {
				t.Fatalf("the aborted writer: %v", err)
			}
			if err := c.Commit(); err == nil {
				t.Fatal("an aborted cut committed")
			}
		case 120:
			delta = writeCut(t, tab, Delta, Checkpoint)
		}
	}
	stop.Store(true)
	wg.Wait()
	if reads.Load() == 0 {
		t.Fatal("the readers did not run")
	}
	restored, _ := New(cfg)
	for _, f := range []*memFile{snap, delta} {
		if err := restored.Apply(f, f.size(), "emb"); err != nil {
			t.Fatal(err)
		}
	}
	got, want := stateOf(restored), stateOf(twin)
	got.seq, got.base = want.seq, want.base
	if err := got.diff(want); err != nil {
		t.Fatalf("snapshot + delta after an aborted delta: %v", err)
	}
}

// Memory follows the live keys: on a vocabulary that drifts (new keys
// appear, old ones fade) a table with a ttl keeps its live rows bounded,
// Sweep and admissions reuse the memory of expired rows, so the rows held
// and the pages stay bounded however long it runs, and Sweep's work per
// call is bounded by its argument.
func TestMemoryFollowsLiveKeys(t *testing.T) {
	tab, _ := New(Config{Dim: 8, TTL: 20})
	slots := make([]int32, 200)
	keys := make([]int64, 200)
	var maxLive, maxHeld int64
	var pagesAt [2]int
	for step := int64(0); step < 3000; step++ {
		if err := tab.Advance(step); err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			keys[i] = step*50 + int64(i) // each key is seen for 4 steps
		}
		if err := tab.Lookup(keys, nil, slots); err != nil {
			t.Fatal(err)
		}
		if freed := tab.Sweep(100); freed > 100 {
			t.Fatalf("Sweep(100) freed %d rows", freed)
		}
		s := tab.Stats()
		maxLive, maxHeld = max(maxLive, s.Live), max(maxHeld, s.Held)
		if step == 500 {
			pagesAt[0] = len(tab.rows.pages)
		}
	}
	pagesAt[1] = len(tab.rows.pages)
	// Live: the keys seen in the last 20 steps (50 new ones a step, 4 steps each).
	if maxLive != 20*50+150 {
		t.Errorf("at most %d live rows, want %d", maxLive, 20*50+150)
	}
	if maxHeld > 2*maxLive || pagesAt[1] != pagesAt[0] {
		t.Errorf("held up to %d rows for %d live, pages %d at step 500 and %d at the end: expired rows' memory is not reused", maxHeld, maxLive, pagesAt[0], pagesAt[1])
	}
	s := tab.Stats()
	if s.EvictedTTL+uint64(s.Live) != s.Admitted {
		t.Errorf("admitted %d, evicted %d, live %d", s.Admitted, s.EvictedTTL, s.Live)
	}
}

// Sweep leaves a small share of expired rows to admissions: on a table
// whose rows expire a few at a time, scattered over its records (keys
// drawn at random from a vocabulary of 5,000: about 3,200 live rows, 18
// expiring a step), it keeps the rows held within 1/sweepSlack of the
// live ones and inspects about sweepSlack records per row freed, not the
// whole table every step.
func TestSweepKeepsSlack(t *testing.T) {
	const vocab, perStep, ttl, steps = 5000, 50, 100, 3000
	tab, _ := New(Config{Dim: 4, TTL: ttl})
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([]int64, perStep)
	slots := make([]int32, perStep)
	var scanned0, expired0 uint64
	last := map[int64]int64{} // the reference: each key's last sighting
	for step := int64(0); step < steps; step++ {
		if err := tab.Advance(step); err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			keys[i] = rng.Int64N(vocab)
			last[keys[i]] = step
		}
		if err := tab.Lookup(keys, nil, slots); err != nil {
			t.Fatal(err)
		}
		tab.Sweep(1 << 16)
		s := tab.Stats()
		if (s.Held-s.Live)*sweepSlack > s.Held {
			t.Fatalf("step %d: %d rows held for %d live after Sweep, more than 1/%d expired", step, s.Held, s.Live, sweepSlack)
		}
		if step == steps/3 {
			scanned0, expired0 = tab.inspected, s.EvictedTTL
		}
	}
	s := tab.Stats()
	live := int64(0)
	for _, seen := range last {
		if seen+ttl > steps-1 {
			live++
		}
	}
	if s.Live != live {
		t.Fatalf("%d live rows, want %d (keys seen in the last %d steps)", s.Live, live, ttl)
	}
	scanned, expired := tab.inspected-scanned0, s.EvictedTTL-expired0
	if perRow := float64(scanned) / float64(expired); perRow > 2*sweepSlack {
		t.Errorf("%d records inspected for %d rows expired, %.0f a row: Sweep scans the table, not the expired rows", scanned, expired, perRow)
	}
	t.Logf("%d records inspected for %d rows expired (%.1f a row); %d held, %d live", scanned, expired, float64(scanned)/float64(expired), s.Held, s.Live)
}
