package replicate

import (
	"maps"
	"slices"
)

// Feed is what one subscriber of one pserver has not been sent yet: the
// dense blocks and the table rows changed since the last delta it took,
// and the newest step applied. The pserver's loops mark what each step
// changed (Applied: O(rows touched), never waiting on the subscriber);
// the subscriber's sender takes a Delta when its connection is free and
// sends the current values of what it names. Updates a slow subscriber
// has not taken are coalesced: a block or row changed by ten steps is
// sent once, with its newest value, so a replica that falls behind gets
// the latest state and never holds training back.
//
// A new subscriber, or one whose connection was lost (it may be a new
// process that holds nothing), is owed everything: its next delta is
// Full.
type Feed struct {
	step    int64
	applied bool // a step was applied since the last Take
	full    bool
	blocks  map[int]struct{}
	rows    map[int]map[int64]struct{}
}

// Delta is what a sender sends next: the step it brings the subscriber
// to, and every block and table row (by table index, ids or keys sorted)
// to send the current values of, or Full: every block and every row.
type Delta struct {
	Step   int64
	Full   bool
	Blocks []int
	Rows   map[int][]int64
}

// NewFeed is the feed of a new subscriber of a pserver at step: its
// first delta is Full.
func NewFeed(step int64) *Feed {
	return &Feed{step: step, full: true, applied: true, blocks: map[int]struct{}{}, rows: map[int]map[int64]struct{}{}}
}

// Applied records that step changed blocks and, per table, rows (ids of
// a fixed table's shard, keys of a dynamic one, removed keys included).
func (f *Feed) Applied(step int64, blocks []int, rows map[int][]int64) {
	f.step, f.applied = max(f.step, step), true
	if f.full {
		return // everything goes anyway
	}
	for _, b := range blocks {
		f.blocks[b] = struct{}{}
	}
	for t, ids := range rows {
		set := f.rows[t]
		if set == nil {
			set = map[int64]struct{}{}
			f.rows[t] = set
		}
		for _, id := range ids {
			set[id] = struct{}{}
		}
	}
}

// Lost records that the subscriber's connection was lost: whoever
// subscribes again is owed everything.
func (f *Feed) Lost() {
	f.full, f.applied = true, true
	clear(f.blocks)
	clear(f.rows)
}

// Pending says whether a delta is owed.
func (f *Feed) Pending() bool { return f.applied }

// Take is the delta owed now, and the feed starts afresh; false when
// nothing is owed.
func (f *Feed) Take() (Delta, bool) {
	if !f.applied {
		return Delta{}, false
	}
	d := Delta{Step: f.step, Full: f.full}
	if !f.full {
		d.Blocks = slices.Sorted(maps.Keys(f.blocks))
		if len(f.rows) > 0 {
			d.Rows = map[int][]int64{}
			for t, set := range f.rows {
				d.Rows[t] = slices.Sorted(maps.Keys(set))
			}
		}
	}
	f.full, f.applied = false, false
	clear(f.blocks)
	clear(f.rows)
	return d, true
}
