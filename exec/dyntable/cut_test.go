package dyntable

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// memFile is an in-memory file (io.WriterAt and io.ReaderAt); onWrite,
// when set, runs before each write.
type memFile struct {
	mu      sync.Mutex
	b       []byte
	onWrite func()
}

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	if m.onWrite != nil {
		m.onWrite()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if end := int(off) + len(p); end > len(m.b) {
		m.b = append(m.b, make([]byte, end-len(m.b))...)
	}
	copy(m.b[off:], p)
	return len(p), nil
}

func (m *memFile) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memFile) size() int64 { return int64(len(m.b)) }

// tableState is everything of a table that its future depends on,
// logically: the live rows (value, state, meta), the watermark, the step,
// the counts, the sketch and the cut chain.
type tableState struct {
	rows     map[int64][]uint64 // meta, then the floats' bits
	w, now   int64
	live     int64
	counters [5]uint64
	sketch   []byte
	seq      uint64
	base     uint64
}

func stateOf(t *Table) tableState {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := tableState{rows: map[int64][]uint64{}, w: t.w, now: int64(t.now), live: t.live, seq: t.seq, base: t.base,
		counters: [5]uint64{t.admitted, t.evictedTTL, t.evictedCap, t.deleted, 0}}
	for slot := int32(0); slot < t.rows.hw; slot++ {
		m := t.rows.meta(slot)
		if m == freeMeta || t.dead(m) {
			continue
		}
		row := []uint64{m}
		for _, f := range t.rows.floats(slot) {
			row = append(row, uint64(math.Float32bits(f)))
		}
		s.rows[t.rows.key(slot)] = row
	}
	if t.sk != nil {
		s.sketch = slices.Clone(t.sk.b)
	}
	return s
}

func (s tableState) diff(o tableState) error {
	if len(s.rows) != len(o.rows) {
		return fmt.Errorf("%d live rows, want %d", len(s.rows), len(o.rows))
	}
	for k, row := range o.rows {
		if got, ok := s.rows[k]; !ok || !slices.Equal(got, row) {
			return fmt.Errorf("key %d: %x, want %x", k, got, row)
		}
	}
	switch {
	case s.w != o.w || s.now != o.now || s.live != o.live:
		return fmt.Errorf("watermark, step, live %d %d %d; want %d %d %d", s.w, s.now, s.live, o.w, o.now, o.live)
	case s.counters != o.counters:
		return fmt.Errorf("counters %v, want %v", s.counters, o.counters)
	case !bytes.Equal(s.sketch, o.sketch):
		return fmt.Errorf("the sketches differ")
	case s.seq != o.seq || s.base != o.base:
		return fmt.Errorf("cut %d of chain %d, want %d of %d", s.seq, s.base, o.seq, o.base)
	}
	return nil
}

// Snapshots and deltas taken while the table keeps working restore it
// exactly. A table runs a random drifting workload (admissions, updates,
// evictions by ttl and capacity, deletes, sweeps); at some steps the owner
// takes a cut and a writer goroutine writes it while the owner goes on
// with later steps (each of the writer's first writes waits for a step,
// so rows change under the walk and copy-on-write must keep the instant).
// Applying the snapshot and each delta in order to a new table gives, at
// every cut, the state the table had then: the reference's rows bit for
// bit, and the watermark, counts, sketch and chain of a twin run without
// cuts. The restored table and the twin then run on together and stay
// identical, step after step.
func TestSnapshotDeltasRestoreBitwise(t *testing.T) {
	for _, c := range refConfigs {
		t.Run(c.name, func(t *testing.T) {
			tab, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			tab.batch = 64
			r := newRef(c.cfg)
			wl := &workload{rng: rand.New(rand.NewPCG(5, uint64(len(c.name)))), universe: 1500, maxBatch: 80, deletes: true}
			twin, _ := New(c.cfg)
			twl := &workload{rng: rand.New(rand.NewPCG(5, uint64(len(c.name)))), universe: 1500, maxBatch: 80, deletes: true}
			cuts := map[int64]Kind{60: Snapshot, 90: Delta, 91: Delta, 130: Delta, 200: Delta}
			last := int64(200)

			type written struct {
				file  *memFile
				kind  Kind
				ref   *refTable
				state tableState
				saved int
				err   error
			}
			var files []*written
			stepped := make(chan struct{})
			var pending chan *written
			for step := int64(0); step <= last; step++ {
				if err := wl.step(tab, r, step); err != nil {
					t.Fatal(err)
				}
				if err := twl.step(twin, nil, step); err != nil {
					t.Fatal(err)
				}
				select {
				case stepped <- struct{}{}:
				default:
				}
				kind, ok := cuts[step]
				if !ok {
					continue
				}
				if pending != nil { // the previous cut is written before the next is taken
					w := waitCut(pending, stepped)
					files = append(files, w)
				}
				cut, err := tab.Cut(kind)
				if err != nil {
					t.Fatal(err)
				}
				w := &written{file: &memFile{}, kind: kind, ref: r.clone(), state: stateOf(twin)}
				w.state.seq, w.state.base = tab.seq, tab.base
				waits := 3
				w.file.onWrite = func() {
					if waits > 0 {
						waits--
						<-stepped
					}
				}
				pending = make(chan *written, 1)
				go func(ch chan *written) {
					_, w.err = cut.WriteSafetensors(w.file, "emb", Checkpoint)
					w.saved = cut.savedRows
					if w.err == nil {
						w.err = cut.Commit()
					}
					ch <- w
				}(pending)
			}
			files = append(files, waitCut(pending, stepped))

			saved := 0
			restored, _ := New(c.cfg)
			for i, w := range files {
				if w.err != nil {
					t.Fatalf("cut %d: %v", i, w.err)
				}
				saved += w.saved
				if err := restored.Apply(w.file, w.file.size(), "emb"); err != nil {
					t.Fatalf("applying %v %d: %v", w.kind, i, err)
				}
				if err := sameAs(restored, w.ref); err != nil {
					t.Fatalf("restored up to %v %d: %v", w.kind, i, err)
				}
				got := stateOf(restored)
				if err := got.diff(w.state); err != nil {
					t.Fatalf("restored up to %v %d: %v", w.kind, i, err)
				}
			}
			if saved == 0 {
				t.Errorf("no row changed under a walk: the test did not exercise copy-on-write")
			}
			for i, w := range files {
				t.Logf("%v %d: %d bytes", w.kind, i, len(w.file.b))
			}
			// Restored and twin go on together.
			g1 := &workload{rng: rand.New(rand.NewPCG(9, 9)), universe: 1500, maxBatch: 80, deletes: true}
			g2 := &workload{rng: rand.New(rand.NewPCG(9, 9)), universe: 1500, maxBatch: 80, deletes: true}
			for step := last + 1; step < last+150; step++ {
				if err := g1.step(restored, nil, step); err != nil {
					t.Fatal(err)
				}
				if err := g2.step(twin, nil, step); err != nil {
					t.Fatal(err)
				}
				if step%10 != 0 && step != last+149 {
					continue
				}
				a, b := stateOf(restored), stateOf(twin)
				a.seq, a.base = b.seq, b.base
				if err := a.diff(b); err != nil {
					t.Fatalf("step %d after the restore: %v", step, err)
				}
			}
		})
	}
}

// waitCut waits for a cut being written, letting its writer's waits for
// a step through meanwhile.
func waitCut[T any](pending chan T, stepped chan struct{}) T {
	for {
		select {
		case w := <-pending:
			return w
		case stepped <- struct{}{}:
		}
	}
}
