package dyntable

import (
	"fmt"
	"slices"
	"testing"
)

// TestDeltaBytesFollowTouchedRows checks that a delta checkpoint's file
// holds the rows touched since the previous cut and not the table: a
// table of 200,000 rows, then deltas after steps touching 500, 2,000 and
// 8,000 of them (and admitting a few new keys). Each delta must be within
// a 4 KiB header of (touched rows) x (the bytes a checkpoint stores per
// row: key, value, state, meta), and the snapshot and deltas applied in
// order must restore the live table bit for bit. A delta that wrote the whole
// table would be about 100,000 / 8,000 = 12 times the largest bound. With
// admission, a delta also holds the admission sketch's chunks that the
// step's sightings wrote (at most the sketch, stated in doc.go): the bound
// adds them.
func TestDeltaBytesFollowTouchedRows(t *testing.T) {
	const rows = 100_000
	for _, admission := range []bool{false, true} {
		t.Run(fmt.Sprintf("admission=%v", admission), func(t *testing.T) {
			cfg := Config{Dim: 16, StateWidth: 16, Seed: 3, Init: Init{Kind: Normal, Std: 0.1}, StateInit: slices.Repeat([]float32{0.1}, 16)}
			count := uint32(1)
			if admission {
				cfg.MinCount, cfg.SketchBytes = 2, 64<<10
				count = 2 // admitted at once
			}
			tab, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			key := func(i int) int64 { return int64(splitmix(uint64(i) ^ 0x77)) }
			lookup := func(step int64, keys []int64) {
				t.Helper()
				if err := tab.Advance(step); err != nil {
					t.Fatal(err)
				}
				counts := slices.Repeat([]uint32{count}, len(keys))
				if err := tab.Lookup(keys, counts, make([]int32, len(keys))); err != nil {
					t.Fatal(err)
				}
			}
			all := make([]int64, rows)
			for i := range all {
				all[i] = key(i)
			}
			lookup(0, all)
			restored, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			write := func(kind Kind) *memFile {
				t.Helper()
				cut, err := tab.Cut(kind)
				if err != nil {
					t.Fatal(err)
				}
				f := &memFile{}
				if _, err := cut.WriteSafetensors(f, "emb", Checkpoint); err != nil {
					t.Fatal(err)
				}
				if err := cut.Commit(); err != nil {
					t.Fatal(err)
				}
				if err := restored.Apply(f, f.size(), "emb"); err != nil {
					t.Fatalf("applying the %v: %v", kind, err)
				}
				return f
			}
			snap := write(Snapshot)
			perRow := int64(8 + 4*cfg.Dim + 4*cfg.StateWidth + 8)
			if min := rows * perRow; snap.size() < min {
				t.Fatalf("the snapshot of %d rows is %d bytes, under %d", rows, snap.size(), min)
			}
			next := rows
			for step, touched := range []int{500, 2000, 8000} {
				keys := make([]int64, 0, touched)
				for i := range touched - touched/10 { // spread over the table
					keys = append(keys, all[(i*7919)%rows])
				}
				for range touched / 10 { // and new keys
					keys = append(keys, key(next))
					next++
				}
				lookup(int64(step+1), keys)
				st := tab.Stats()
				sketch := int64(0)
				if admission {
					sketch = st.Bytes.Sketch
				}
				d := write(Delta)
				bound := int64(touched)*perRow + sketch + 4096
				t.Logf("%d rows touched: delta %d bytes (bound %d; snapshot %d)", touched, d.size(), bound, snap.size())
				if d.size() < int64(touched)*perRow {
					t.Errorf("%d rows touched: the delta is %d bytes, under the %d of its rows", touched, d.size(), int64(touched)*perRow)
				}
				if d.size() > bound {
					t.Errorf("%d rows touched: the delta is %d bytes, over %d: it holds more than the rows touched", touched, d.size(), bound)
				}
			}
			if err := stateOf(restored).diff(stateOf(tab)); err != nil {
				t.Fatalf("the snapshot and deltas restored: %v", err)
			}
		})
	}
}
