package dyntable

import (
	"errors"
	"fmt"
	"runtime"
)

// A cut is the table as it was at one instant, written out while the
// owner goes on. Cut (called by the owner between steps) records the
// table's scalars and takes over the sets of slots, sketch chunks and
// removed keys written since the last cut: O(1) under the lock (the
// memory a cut needs is allocated and touched before the lock is taken).
// Writing then walks the slots (and the sketch's chunks) in batches of
// cutBatch, taking the table's lock for each batch only, and
// copy-on-write keeps the instant: while the walk runs, the first change
// to a record it has not reached yet (a lookup touching the row, an
// update, an eviction reusing the slot) copies the record's old bytes to
// the cut's arena (16 + 4*(dim+state) bytes per row changed during the
// walk, in chunks that never move), marks the slot in the cut's saved
// set, and the walk skips it; the arena's records are written after the
// walk. A lookup therefore waits at most for one batch (1024 records,
// ~0.02 ms of work; BenchmarkSnapshotPause) however large the table.
// The writer yields its processor after each hold (runtime.Gosched): Go's
// mutex lets a running goroutine take the lock again before a waiter it
// woke, for up to 1 ms at a time, and a writer whose holds follow each
// other closely (a delta's count, a walk skipping most slots, a walk
// whose rows are written to the page cache in microseconds) would keep
// a lookup waiting that long at each of its acquisitions
// (BenchmarkDeltaPause; BenchmarkPServerSnapshotPause in exec/job).
//
// A Snapshot holds every live row; a Delta the rows written since the
// previous cut (a row a lookup saw is written: its last-seen step and
// sightings changed) and the keys removed since; an Export every live
// row, for a model file, outside the chain of snapshots and deltas.
// Applying a snapshot and then its deltas in order to a new table
// reproduces the table at the last cut exactly
// (TestSnapshotDeltasRestoreBitwise): rows, optimizer state, the eviction
// bookkeeping and the admission sketch.
//
// Every cut must end with Commit, once its file is durable, or Abort:
// an aborted cut gives its sets back, so the next delta holds its rows.

// Kind is a cut's kind.
type Kind uint8

const (
	// Snapshot holds every live row and starts a new chain of deltas.
	Snapshot Kind = iota
	// Delta holds the rows written and the keys removed since the
	// previous Snapshot or Delta.
	Delta
	// Export holds every live row, for a model file, and leaves the chain
	// of snapshots and deltas alone.
	Export
)

func (k Kind) String() string {
	switch k {
	case Delta:
		return "delta"
	case Export:
		return "export"
	}
	return "snapshot"
}

var errAborted = errors.New("dynamic table: the cut was aborted while being written")

// cutBatch is the number of records a cut copies per hold of the lock.
const cutBatch = 1024

// arenaRecords is the number of records a chunk of a cut's arena holds.
const arenaRecords = 256

// Cut is the table at one instant, being written.
type Cut struct {
	t        *Table
	kind     Kind
	step     uint32
	w        int64
	live     int64
	seq      uint64
	base     uint64
	prevSeq  uint64
	prevBase uint64
	prevTrk  bool
	counters [5]uint64
	end      int32   // slots [0, end) existed
	rows     bitset  // Delta: the slots written since the last cut
	born     bitset  // the slots whose row was created since the last cut
	chunks   bitset  // the sketch chunks written since the last cut
	removed  []int64 // the keys removed since the last cut

	// Copy-on-write, while copying.
	copying bool
	cursor  int32  // the walk wrote the slots below
	counted int32  // a Delta's count went past the slots below
	saved   bitset // slots copied to the arena
	arena   arena
	// Records the count had counted from the table before they were
	// copied (a Delta's count counts the others from the arena).
	countedBefore bitset
	skCursor      int
	skSaved       [][]byte // per sketch chunk of the cut: its copy
	skChunks      int      // the sketch's chunks at the cut
	skKeys        int64    // the sketch's keys of its newest generation at the cut
	savedRows     int      // records copied to the arena
	// holding, when set (by tests), is called when a batch takes the
	// table's lock and when it lets it go.
	holding func(taken bool)

	used, written, done bool
}

// arena holds a cut's copies of records in chunks that never move. The
// walk keeps a few chunks ready (allocated and touched outside the lock),
// so a copy made under the lock rarely meets fresh memory.
type arena struct {
	stride int
	chunks [][]uint64
	n      int // records
	ready  [][]uint64
}

func (a *arena) add(rec []uint64) {
	if a.n/arenaRecords == len(a.chunks) {
		if k := len(a.ready); k > 0 {
			a.chunks = append(a.chunks, a.ready[k-1])
			a.ready = a.ready[:k-1]
		} else {
			a.chunks = append(a.chunks, make([]uint64, arenaRecords*a.stride))
		}
	}
	copy(a.chunks[a.n/arenaRecords][(a.n%arenaRecords)*a.stride:], rec)
	a.n++
}

func (a *arena) rec(i int) []uint64 {
	o := (i % arenaRecords) * a.stride
	return a.chunks[i/arenaRecords][o : o+a.stride]
}

// prepare allocates and touches n chunks (without the table's lock).
func (a *arena) prepare(n int) [][]uint64 {
	out := make([][]uint64, n)
	for i := range out {
		out[i] = make([]uint64, arenaRecords*a.stride)
		for j := 0; j < len(out[i]); j += 512 {
			out[i][j] = 0
		}
	}
	return out
}

// readyChunks is the number of arena chunks the walk keeps ready.
const readyChunks = 64

// touched returns a bitset of n bits whose memory has been written.
func touched(n int) bitset {
	b := make(bitset, (n+63)/64+(n+63)/256)
	for i := 0; i < len(b); i += 512 {
		b[i] = 0
	}
	return b
}

// Cut takes a snapshot, a delta or an export of the table as it is now.
// Call it between steps (after the step's updates, before the next
// Advance): the cut is of that step. Only one cut is open at a time.
func (t *Table) Cut(kind Kind) (*Cut, error) {
	if kind > Export {
		return nil, fmt.Errorf("dynamic table: unknown cut kind %d", kind)
	}
	t.mu.Lock()
	n := int(t.rows.hw)
	t.mu.Unlock()
	saved := touched(n + pageRows)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut != nil {
		return nil, errors.New("dynamic table: a snapshot or delta of this table is still open (Commit or Abort it first)")
	}
	if kind == Delta && !t.tracking {
		return nil, errors.New("dynamic table: a delta needs a snapshot before it (take a Snapshot first)")
	}
	c := &Cut{t: t, kind: kind, step: t.now, w: t.w, live: t.live, prevSeq: t.seq, prevBase: t.base,
		counters: [5]uint64{t.admitted, t.evictedTTL, t.evictedCap, t.deleted, t.reclaimed}, end: t.rows.hw, prevTrk: t.tracking,
		saved: saved, arena: arena{stride: t.rows.stride}}
	c.saved.grow(int(c.end))
	if t.sk != nil {
		// The sketch's chunks now: a generation added later is the next
		// delta's.
		c.skChunks, c.skKeys = t.sk.chunks(), t.sk.keys
		c.skSaved = make([][]byte, c.skChunks)
	}
	c.copying = true
	t.cut = c
	if kind == Export {
		c.seq, c.base = t.seq, t.base
		return c, nil
	}
	t.seq++
	if kind == Snapshot {
		t.base = t.seq
	}
	c.seq, c.base = t.seq, t.base
	c.rows, t.dirty = t.dirty, t.spare[0]
	c.born, t.born = t.born, t.spare[1]
	c.chunks, t.skDirty = t.skDirty, t.spare[2]
	t.spare = [3]bitset{}
	t.dirty.grow(int(t.rows.hw))
	t.born.grow(int(t.rows.hw))
	if t.sk != nil {
		t.skDirty.grow(t.sk.chunks())
	}
	c.removed, t.removed = t.removed, nil
	t.tracking = true
	return c, nil
}

// Kind is the cut's kind; Step the step it was taken at.
func (c *Cut) Kind() Kind  { return c.kind }
func (c *Cut) Step() int64 { return int64(c.step) }

// wants reports whether the walk still needs slot's record as it was.
func (c *Cut) wants(slot int32) bool {
	return slot >= c.cursor && slot < c.end && (c.kind != Delta || c.rows.has(slot)) && !c.saved.has(slot)
}

// saveRow copies slot's record to the arena before its first change
// during the walk (under the table's lock).
func (c *Cut) saveRow(slot int32) {
	if !c.wants(slot) {
		return
	}
	c.saved.set(slot)
	c.savedRows++
	if slot < c.counted {
		c.countedBefore.grow(c.arena.n + 1)
		c.countedBefore.set(int32(c.arena.n))
	}
	c.arena.add(c.t.rows.rec(slot))
}

func (c *Cut) saveChunk(chunk int) {
	if chunk < c.skCursor || chunk >= c.skChunks || (c.kind == Delta && !c.chunks.has(int32(chunk))) || c.skSaved[chunk] != nil {
		return
	}
	c.skSaved[chunk] = append([]byte(nil), c.t.sk.b[chunk<<chunkBits:(chunk+1)<<chunkBits]...)
}

// chunk is a sketch chunk as it was at the cut.
func (c *Cut) chunk(i int) []byte {
	if c.skSaved != nil && c.skSaved[i] != nil {
		return c.skSaved[i]
	}
	return c.t.sk.b[i<<chunkBits : (i+1)<<chunkBits]
}

// liveAt reports whether a record held a live row at the cut.
func (c *Cut) liveAt(m uint64) bool {
	return m != freeMeta && (c.t.mode == modeNone || c.t.score(m) > c.w)
}

// Batch is a run of a cut's rows: Keys[i] has Values[i*dim:(i+1)*dim],
// State[i*state:(i+1)*state] and Meta[i] (see rows.go for the meta's
// encoding).
type Batch struct {
	Keys   []int64
	Values []float32
	State  []float32
	Meta   []uint64
}

// count is the number of rows the cut holds: a Delta counts its written
// slots that were live, from the table for the slots not copied yet and
// from the arena for the others.
func (c *Cut) count() (int64, error) {
	if c.kind != Delta {
		return c.live, nil
	}
	t := c.t
	var n int64
	for lo := int32(0); lo < c.end; lo += t.batch {
		t.mu.Lock()
		if c.done {
			t.mu.Unlock()
			return 0, errAborted
		}
		if c.holding != nil {
			c.holding(true)
		}
		hi := min(lo+t.batch, c.end)
		for slot := lo; slot < hi; slot++ {
			if c.rows.has(slot) && !c.saved.has(slot) && c.liveAt(t.rows.meta(slot)) {
				n++
			}
		}
		c.counted = hi
		if c.holding != nil {
			c.holding(false)
		}
		t.mu.Unlock()
		runtime.Gosched()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range c.arena.n {
		if !c.countedBefore.has(int32(i)) && c.liveAt(c.arena.rec(i)[1]) {
			n++
		}
	}
	return n, nil
}

// eachRow hands the cut's rows to fn, a batch per hold of the lock: the
// slots in order, skipping those copied aside, then the copies.
func (c *Cut) eachRow(fn func(b *Batch) error) (int64, error) {
	t := c.t
	d, sw := t.dim, t.width-t.dim
	b := &Batch{
		Keys:   make([]int64, 0, t.batch),
		Values: make([]float32, 0, int(t.batch)*d),
		State:  make([]float32, 0, int(t.batch)*sw),
		Meta:   make([]uint64, 0, t.batch),
	}
	// Touch the buffers now: their first page faults must not happen
	// while the lock is held.
	for _, f := range [][]float32{b.Values[:cap(b.Values)], b.State[:cap(b.State)]} {
		for i := 0; i < len(f); i += 1024 {
			f[i] = 0
		}
	}
	for i := 0; i < cap(b.Keys); i += 512 {
		b.Keys[:cap(b.Keys)][i], b.Meta[:cap(b.Meta)][i] = 0, 0
	}
	add := func(rec []uint64) {
		if !c.liveAt(rec[1]) {
			return
		}
		f := floatsOf(rec[2:], t.width)
		b.Keys = append(b.Keys, int64(rec[0]))
		b.Meta = append(b.Meta, rec[1])
		b.Values = append(b.Values, f[:d]...)
		b.State = append(b.State, f[d:]...)
	}
	var n int64
	flush := func() error {
		n += int64(len(b.Keys))
		if len(b.Keys) == 0 {
			return nil
		}
		err := fn(b)
		b.Keys, b.Values, b.State, b.Meta = b.Keys[:0], b.Values[:0], b.State[:0], b.Meta[:0]
		return err
	}
	// hold runs body under the lock, timed.
	// low: the arena's ready chunks ran low at the last hold (read under
	// the lock: the owner's copies take them).
	low := true
	hold := func(body func()) error {
		var ready [][]uint64
		if low {
			ready = c.arena.prepare(readyChunks)
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		if c.done {
			return errAborted
		}
		c.arena.ready = append(c.arena.ready, ready...)
		if c.holding != nil {
			c.holding(true)
		}
		body()
		low = len(c.arena.ready) < readyChunks/2
		if c.holding != nil {
			c.holding(false)
		}
		return nil
	}
	for c.cursor < c.end {
		err := hold(func() {
			hi := min(c.cursor+t.batch, c.end)
			for slot := c.cursor; slot < hi; slot++ {
				if (c.kind == Delta && !c.rows.has(slot)) || c.saved.has(slot) {
					continue
				}
				add(t.rows.rec(slot))
			}
			c.cursor = hi
		})
		if err != nil {
			return n, err
		}
		runtime.Gosched()
		if err := flush(); err != nil {
			return n, err
		}
	}
	// The walk is over: no more copies are made; the arena is the cut's.
	for i := 0; i < c.arena.n; i += int(t.batch) {
		for j := i; j < min(i+int(t.batch), c.arena.n); j++ {
			add(c.arena.rec(j))
		}
		if err := flush(); err != nil {
			return n, err
		}
	}
	return n, nil
}

// eachChunk walks the cut's sketch chunks (all for a snapshot, those
// written since the last cut for a delta), a batch per hold of the lock.
func (c *Cut) eachChunk(fn func(i int, b []byte) error) error {
	t := c.t
	if t.sk == nil {
		return nil
	}
	buf := make([]byte, 64*chunkBytes)
	ids := make([]int, 0, 64)
	for c.skCursor < c.skChunks {
		ids, buf = ids[:0], buf[:0]
		t.mu.Lock()
		if c.done {
			t.mu.Unlock()
			return errAborted
		}
		hi := min(c.skCursor+64, c.skChunks)
		for i := c.skCursor; i < hi; i++ {
			if c.kind == Delta && !c.chunks.has(int32(i)) {
				continue
			}
			ids = append(ids, i)
			buf = append(buf, c.chunk(i)...)
		}
		c.skCursor = hi
		t.mu.Unlock()
		runtime.Gosched()
		for j, i := range ids {
			if err := fn(i, buf[j*chunkBytes:(j+1)*chunkBytes]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Cut) chunkCount() int {
	switch {
	case c.t.sk == nil:
		return 0
	case c.kind != Delta:
		return c.skChunks
	}
	n := 0
	for i := range c.skChunks {
		if c.chunks.has(int32(i)) {
			n++
		}
	}
	return n
}

// start marks the cut used; a cut is written once.
func (c *Cut) start() error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	switch {
	case c.done:
		return errors.New("dynamic table: the cut was committed or aborted")
	case c.used:
		return errors.New("dynamic table: a cut is written once")
	}
	c.used = true
	return nil
}

// skipSketch ends the sketch's copy-on-write: the cut is written without
// the sketch.
func (c *Cut) skipSketch() {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	c.skCursor = 1 << 30
}

// finish ends the copy-on-write and drops the copies; ok says whether
// the cut was written whole.
func (c *Cut) finish(ok bool) {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	c.written = ok && !c.done
	c.copying = false
	c.cursor, c.skCursor = c.end, 1<<30
	c.arena, c.saved, c.countedBefore, c.skSaved = arena{}, nil, nil, nil
}

// Commit ends the cut once what was written is durable: the next delta
// holds what changed after it.
func (c *Cut) Commit() error {
	t := c.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.done {
		return errors.New("dynamic table: the cut was committed or aborted already")
	}
	if !c.written {
		return errors.New("dynamic table: the cut was not written whole; Abort it (its rows go to the next delta)")
	}
	c.close()
	if c.kind == Export {
		return nil
	}
	clear(c.rows)
	clear(c.born)
	clear(c.chunks)
	t.spare = [3]bitset{c.rows, c.born, c.chunks}
	return nil
}

// Abort ends the cut as if it had not been taken: what it held goes back
// to the table's sets, so the next delta holds it. Safe after Commit.
func (c *Cut) Abort() {
	t := c.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.done {
		return
	}
	c.close()
	if c.kind == Export {
		return
	}
	t.dirty.or(c.rows)
	t.born.or(c.born)
	t.skDirty.or(c.chunks)
	t.removed = append(c.removed, t.removed...)
	t.seq, t.base, t.tracking = c.prevSeq, c.prevBase, c.prevTrk
	if !t.tracking {
		t.removed = t.removed[:0]
	}
}

func (c *Cut) close() {
	c.done = true
	c.copying = false
	c.arena, c.saved, c.countedBefore, c.skSaved = arena{}, nil, nil, nil
	c.t.cut = nil
}

func (c *Cut) String() string {
	return fmt.Sprintf("%v %d of step %d", c.kind, c.seq, c.step)
}
