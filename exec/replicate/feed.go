package replicate

import (
	"maps"
	"math/bits"
	"slices"
)

// Feed is what one subscriber of one pserver has not been sent yet: the
// dense blocks and the table rows changed since the last delta it took,
// and the newest step applied. The pserver's loops mark what each step
// changed (Applied, Block, Rows: a bit per row, so marking a step's rows
// costs a few nanoseconds each and allocates nothing, never waiting on
// the subscriber); the subscriber's sender takes a Delta when its
// connection is free and sends the current values of what it names.
// Updates a slow subscriber has not taken are coalesced: a block or row
// changed by ten steps is sent once, with its newest value, so a replica
// that falls behind gets the latest state and never holds training back.
//
// A new subscriber, or one whose connection was lost (it may be a new
// process that holds nothing), is owed everything: every subscription
// starts with a new Feed, whose first delta is Full.
type Feed struct {
	step    int64
	applied bool // a step was applied since the last Take
	full    bool
	blocks  map[int]struct{}
	rows    [][]uint64 // per table: a bit per row changed
	dirty   []bool     // per table: a bit is set
}

// Delta is what a sender sends next: the step it brings the subscriber
// to, and every block and table row (by table index, local row ids in
// ascending order) to send the current values of, or Full: every block
// and every row.
type Delta struct {
	Step   int64
	Full   bool
	Blocks []int
	Rows   map[int][]int64
}

// NewFeed is the feed of a new subscriber of a pserver at step whose
// tables hold tableRows[t] rows: its first delta is Full.
func NewFeed(step int64, tableRows []int) *Feed {
	f := &Feed{step: step, full: true, applied: true, blocks: map[int]struct{}{}, dirty: make([]bool, len(tableRows))}
	for _, n := range tableRows {
		f.rows = append(f.rows, make([]uint64, (n+63)/64))
	}
	return f
}

// Applied records that step was applied; Block and Rows say what it
// changed.
func (f *Feed) Applied(step int64) { f.step, f.applied = max(f.step, step), true }

// Block records that a step changed dense block b.
func (f *Feed) Block(b int) {
	if !f.full {
		f.blocks[b] = struct{}{}
	}
}

// Rows records that a step changed rows ids of table t (each below the
// table's rows; a dynamic table's slots, whose count grows, grow it).
func (f *Feed) Rows(t int, ids []int32) {
	if f.full || len(ids) == 0 {
		return
	}
	bs := f.rows[t]
	for _, id := range ids {
		w := int(uint32(id) >> 6)
		if w >= len(bs) {
			bs = append(bs, make([]uint64, w+1-len(bs)+len(bs)/4)...)
			f.rows[t] = bs
		}
		bs[w] |= 1 << (uint32(id) & 63)
	}
	f.dirty[t] = true
}

func (f *Feed) reset() {
	clear(f.blocks)
	for t, d := range f.dirty {
		if d {
			clear(f.rows[t])
			f.dirty[t] = false
		}
	}
}

// Take is the delta owed now, and the feed starts afresh; false when
// nothing is owed.
func (f *Feed) Take() (Delta, bool) {
	if !f.applied {
		return Delta{}, false
	}
	d := Delta{Step: f.step, Full: f.full}
	if !f.full {
		d.Blocks = slices.Sorted(maps.Keys(f.blocks))
		for t, dirty := range f.dirty {
			if !dirty {
				continue
			}
			if d.Rows == nil {
				d.Rows = map[int][]int64{}
			}
			var ids []int64
			for w, word := range f.rows[t] {
				for word != 0 {
					ids = append(ids, int64(w*64+bits.TrailingZeros64(word)))
					word &= word - 1
				}
			}
			d.Rows[t] = ids
		}
	}
	f.full, f.applied = false, false
	f.reset()
	return d, true
}
