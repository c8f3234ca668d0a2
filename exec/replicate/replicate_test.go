package replicate

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// A subscriber that takes nothing for several steps gets one delta: the
// newest step, and every block and row those steps changed, once, sorted.
func TestFeedCoalescesWhatASlowSubscriberMissed(t *testing.T) {
	f := NewFeed(4, []int{10, 200})
	if d, ok := f.Take(); !ok || !d.Full || d.Step != 4 {
		t.Fatalf("a new subscriber's first delta %+v %v, want full at step 4", d, ok)
	}
	if _, ok := f.Take(); ok {
		t.Fatal("a delta owed with no step applied")
	}
	f.Applied(5)
	f.Block(2)
	f.Block(0)
	f.Rows(1, []int32{9, 3, 130})
	f.Applied(6)
	f.Block(2)
	f.Rows(1, []int32{3, 7})
	f.Rows(0, []int32{1})
	f.Applied(7)
	f.Rows(1, []int32{9, 199})
	d, ok := f.Take()
	if !ok || d.Full || d.Step != 7 || !slices.Equal(d.Blocks, []int{0, 2}) || !slices.Equal(d.Rows[1], []int64{3, 7, 9, 130, 199}) || !slices.Equal(d.Rows[0], []int64{1}) {
		t.Fatalf("delta %+v %v, want step 7, blocks [0 2], rows {0:[1] 1:[3 7 9 130 199]}", d, ok)
	}
}

// Against a reference that keeps every step's changes: whatever the order
// of steps and takes, every change of a step applied after a take is in
// the next take, nothing else is, and the step is the newest.
func TestFeedLosesNoChange(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for run := range 200 {
		f := NewFeed(0, []int{20})
		f.Take()
		var step int64
		wantBlocks := map[int]bool{}
		wantRows := map[int64]bool{}
		for range 50 {
			if r.IntN(3) > 0 {
				step++
				f.Applied(step)
				for range r.IntN(4) {
					b := r.IntN(6)
					wantBlocks[b] = true
					f.Block(b)
				}
				var rows []int32
				for range r.IntN(8) {
					id := r.Int32N(20)
					rows = append(rows, id)
					wantRows[int64(id)] = true
				}
				f.Rows(0, rows)
				continue
			}
			d, ok := f.Take()
			if !ok {
				continue
			}
			var gotRows []int64
			if d.Rows != nil {
				gotRows = d.Rows[0]
			}
			for _, b := range d.Blocks {
				if !wantBlocks[b] {
					t.Fatalf("run %d: block %d taken, not changed", run, b)
				}
				delete(wantBlocks, b)
			}
			for _, id := range gotRows {
				if !wantRows[id] {
					t.Fatalf("run %d: row %d taken, not changed", run, id)
				}
				delete(wantRows, id)
			}
			if len(wantBlocks) > 0 || len(wantRows) > 0 || d.Step != step {
				t.Fatalf("run %d: delta %+v misses blocks %v rows %v (step %d)", run, d, wantBlocks, wantRows, step)
			}
		}
	}
}

// A replica is Ready once every pserver's full state arrived and it
// applied what each announced; it serves the oldest step applied; a
// pserver that restarted (another incarnation), a partial delta before
// the full state or a step going back makes it subscribe again, and a
// lost subscription makes it not Ready until the next full state.
func TestFollowReadyVersionAndResubscribe(t *testing.T) {
	f := NewFollow(2)
	if f.Ready() || f.Version() != -1 {
		t.Fatal("ready before subscribing")
	}
	f.Subscribed(0, 11, 40)
	f.Subscribed(1, 21, 41)
	if a, err := f.Received(0, 11, Delta{Step: 40}); a != Resubscribe || err == nil {
		t.Errorf("a partial delta before the full state: %v %v, want Resubscribe", a, err)
	}
	for _, c := range []struct {
		p     int
		inc   uint64
		d     Delta
		ready bool
		v     int64
	}{
		{0, 11, Delta{Step: 40, Full: true}, false, -1},
		{1, 21, Delta{Step: 40, Full: true}, false, 40}, // pserver 1 announced 41
		{1, 21, Delta{Step: 41}, true, 40},
		{0, 11, Delta{Step: 43}, true, 41},
		{1, 21, Delta{Step: 44}, true, 43},
	} {
		if a, err := f.Received(c.p, c.inc, c.d); a != Apply || err != nil {
			t.Fatalf("%+v: %v %v, want Apply", c, a, err)
		}
		if f.Ready() != c.ready || f.Version() != c.v {
			t.Errorf("after %+v: ready %v version %d, want %v %d", c, f.Ready(), f.Version(), c.ready, c.v)
		}
	}
	if a, _ := f.Received(1, 22, Delta{Step: 45, Full: true}); a != Resubscribe {
		t.Error("a delta of a restarted pserver (new incarnation) applied on the old subscription")
	}
	if a, _ := f.Received(1, 21, Delta{Step: 42}); a != Resubscribe {
		t.Error("a step going back applied")
	}
	f.Lost(1)
	if f.Ready() || f.Version() != -1 {
		t.Error("ready with a lost subscription")
	}
	f.Subscribed(1, 22, 30) // restarted from its checkpoint of step 30
	if a, err := f.Received(1, 22, Delta{Step: 30, Full: true}); a != Apply || err != nil || !f.Ready() || f.Version() != 30 {
		t.Errorf("the restarted pserver's full state: %v %v ready %v version %d", a, err, f.Ready(), f.Version())
	}
}

// A dynamic table's feed grows with the slots marked: a table of no rows
// when the subscriber came marks slots far past them.
func TestFeedGrowsForDynamicSlots(t *testing.T) {
	f := NewFeed(0, []int{0, 10})
	f.Take() // the full state
	f.Applied(1)
	f.Rows(0, []int32{4000, 3, 4000})
	f.Rows(1, []int32{9})
	f.Applied(2)
	f.Rows(0, []int32{70000})
	d, ok := f.Take()
	if !ok || d.Full || !slices.Equal(d.Rows[0], []int64{3, 4000, 70000}) || !slices.Equal(d.Rows[1], []int64{9}) || d.Step != 2 {
		t.Fatalf("%+v %v", d, ok)
	}
	if d, ok := f.Take(); ok {
		t.Fatalf("a second delta %+v", d)
	}
}
