package dyntable

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"unsafe"

	"github.com/psgraph/psgraph/exec/blas"
)

// NoRow is the slot of a key that has no row: Lookup did not admit it (or
// Find did not find it). Gather reads the default row for it; Scatter
// skips it, so its gradient is dropped.
const NoRow int32 = -1

// reclaimScan bounds the records an admission inspects for an expired or
// evicted row to reuse before it takes a fresh slot.
const reclaimScan = 64

type mode uint8

const (
	modeNone mode = iota // no ttl, no capacity: rows live forever
	modeStep             // ttl and/or lru capacity: a row dies by its last-seen step
	modeLFU              // lfu capacity: a row dies by its priority
)

// Table is one shard of a dynamic embedding table: 64-bit keys mapped to
// rows of Dim floats of value and StateWidth floats of optimizer state,
// created when a key is admitted and removed by ttl, capacity or Delete.
//
// One goroutine, the table's owner (the pserver loop serving the shard),
// calls the methods that change rows: Advance, Lookup, Pull, Scatter,
// Sweep, Delete, Cut and Apply. Any goroutine may call Find, Gather, Read
// and Stats, and write a Cut, concurrently with the owner. A slot that
// Lookup or Find returned stays the key's until the owner's next Advance,
// Sweep or Delete (rows seen at the current step are never evicted).
type Table struct {
	mu    sync.Mutex
	cfg   Config
	mode  mode
	dim   int
	width int
	idx   index
	rows  rows
	sk    *sketch
	blank []float32 // the row a key without one reads: Default, then StateInit
	pcg   *rand.PCG
	rnd   *rand.Rand

	now       uint32 // the current step
	w         int64  // watermark: a row whose score is <= w is dead
	hist      ring   // live rows by score, for scores in (w, ...)
	live      int64
	hand      int32  // next record Sweep and admissions inspect
	inspected uint64 // records Sweep and admissions inspected, for tests
	batch     int32  // records a cut copies per hold of the lock (cutBatch)
	sink      uint64 // where sweep's plain loads go (the compiler must keep them)

	sweepBuf []int32
	// pullBytes are the bytes of a record a pull reads: key, meta, value.
	pullBytes int
	// A batch lookup's scratch (resolveHomes).
	his       [lookupChunk]uint32
	homes     [lookupChunk]int32
	readSlots [lookupChunk]int32

	admitted, evictedTTL, evictedCap, deleted, reclaimed uint64

	// Since the last cut: the slots written, the slots whose row was
	// created, the sketch chunks written, and the keys of rows removed
	// that the last cut may hold (kept once a cut or Apply started a
	// chain; a row created and removed between two cuts is in neither).
	dirty, born, skDirty bitset
	removed              []int64
	tracking             bool
	seq, base            uint64 // the last cut's number and its chain's snapshot
	cut                  *Cut   // the cut being written, if any
	spare                [3]bitset

	pub    *pubSlots // the slots written for a publisher (Publish; mirror.go)
	mirror *mirror   // a serving replica's mirror of a split table's shards
}

// New makes an empty table.
func New(cfg Config) (*Table, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg.StateInit = append([]float32(nil), cfg.StateInit...)
	cfg.Default = append([]float32(nil), cfg.Default...)
	t := &Table{cfg: cfg, dim: cfg.Dim, width: cfg.Dim + cfg.StateWidth, idx: newIndex(), w: -1, batch: cutBatch, sweepBuf: make([]int32, 0, sweepBatch)}
	t.rows = newRows(t.width)
	t.pullBytes = 16 + 4*t.dim
	switch {
	case cfg.Capacity > 0 && cfg.Evict == LFU:
		t.mode, t.w = modeLFU, 0
	case cfg.TTL > 0 || cfg.Capacity > 0:
		t.mode = modeStep
	}
	t.hist.init(t.w + 1)
	t.blank = make([]float32, t.width)
	copy(t.blank, cfg.Default)
	copy(t.blank[t.dim:], cfg.StateInit)
	t.pcg = rand.NewPCG(0, 0)
	t.rnd = rand.New(t.pcg)
	if !cfg.admitsAll() {
		t.sk = newSketch(cfg.sketchLimit(), cfg.MinCount > 2 || cfg.prob() < 1, cfg.Seed, t.touchChunk)
		t.skDirty.grow(t.sk.chunks())
	}
	return t, nil
}

// Config returns the table's configuration.
func (t *Table) Config() Config {
	c := t.cfg
	c.StateInit = append([]float32(nil), c.StateInit...)
	c.Default = append([]float32(nil), c.Default...)
	return c
}

func (t *Table) touchChunk(chunk int) {
	t.skDirty.set(int32(chunk))
	if c := t.cut; c != nil && c.copying {
		c.saveChunk(chunk)
	}
}

// preWrite must precede every change to slot's record. The written
// slots are kept only once a chain is tracked (a cut or Apply started
// it): a table never cut (a local run without checkpoints) skips the
// bitsets, a random write into 1 bit per row per write (a local run of
// 4.5M rows: 10% less CPU, bench/dyn_targets.sh).
func (t *Table) preWrite(slot int32) {
	if c := t.cut; c != nil && c.copying {
		c.saveRow(slot)
	}
	if t.tracking {
		t.dirty.set(slot)
	}
	if t.pub != nil {
		t.pub.mark(slot, t.rows.hw)
	}
}

// score is what a row dies by: its last-seen step, or its LFU priority.
func (t *Table) score(m uint64) int64 {
	if t.mode == modeLFU {
		return int64(m)
	}
	return int64(uint32(m))
}

func (t *Table) dead(m uint64) bool { return t.mode != modeNone && t.score(m) <= t.w }

// Advance moves the table to step (>= the current one; call it before
// the step's first Lookup). Rows not seen for TTL steps expire, and with
// a Capacity the rows Evict chooses go until at most Capacity are live.
// The rows are gone at once for every method; their memory is reclaimed
// by Sweep and by later admissions.
func (t *Table) Advance(step int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if step < int64(t.now) || step > maxStep {
		return fmt.Errorf("dynamic table: step %d after step %d (steps go forward, up to %d)", step, t.now, int64(maxStep))
	}
	t.advance(uint32(step))
	return nil
}

func (t *Table) advance(step uint32) {
	t.now = step
	if t.cfg.TTL > 0 {
		t.evictedTTL += uint64(t.raise(int64(step) - t.cfg.TTL))
	}
	if t.cfg.Capacity <= 0 {
		return
	}
	for t.live > int64(t.cfg.Capacity) {
		if t.mode == modeStep && t.w >= int64(step)-1 {
			break // rows seen at the current step stay
		}
		t.evictedCap += uint64(t.raise(t.w + 1))
	}
}

// raise moves the watermark up to to, killing the live rows of scores
// (w, to]; it returns how many.
func (t *Table) raise(to int64) int64 {
	if to <= t.w {
		return 0
	}
	n := t.hist.drop(to)
	t.w = to
	t.live -= n
	return n
}

// Lookup resolves keys to slots for the current step, creating the rows
// of keys admitted now, and counts the sighting: counts[i] sightings of
// keys[i] (nil: one each). A key that has no row and is not admitted gets
// NoRow. A key repeated in keys counts each time. It fails only when the
// shard cannot grow (2^31 rows).
func (t *Table) Lookup(keys []int64, counts []uint32, slots []int32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lookup(keys, counts, slots, nil)
}

// lookup is Lookup, and with dst the copy of Pull: each group of keys'
// values are copied while their records are in the cache.
func (t *Table) lookup(keys []int64, counts []uint32, slots []int32, dst []float32) error {
	slots = slots[:len(keys)]
	for lo := 0; lo < len(keys); lo += lookupChunk {
		hi := min(lo+lookupChunk, len(keys))
		t.resolveHomes(keys[lo:hi])
		var cs []uint32
		if counts != nil {
			cs = counts[lo:hi]
		}
		if err := t.lookupChunk(keys[lo:hi], cs, slots[lo:hi]); err != nil {
			return err
		}
		if dst != nil {
			t.copyValues(slots[lo:hi], dst[lo*t.dim:hi*t.dim])
		}
	}
	return nil
}

// copyValues copies the values of slots' rows into dst, the default row
// for NoRow.
func (t *Table) copyValues(slots []int32, dst []float32) {
	d := t.dim
	for i, slot := range slots {
		if slot < 0 {
			copy(dst[i*d:(i+1)*d], t.blank[:d])
		} else {
			copy(dst[i*d:(i+1)*d], t.rows.floats(slot)[:d])
		}
	}
}

// lookupChunk is lookup of at most lookupChunk keys, once resolveHomes
// found those it could.
func (t *Table) lookupChunk(keys []int64, counts []uint32, slots []int32) error {
	for i, key := range keys {
		c := 1
		if counts != nil && counts[i] > 1 {
			c = int(counts[i])
		}
		if slot := t.homes[i]; slot >= 0 && t.rows.key(slot) == key {
			// Still key's row unless an admission before it in the
			// batch freed it (free records have meta freeMeta).
			if m := t.rows.meta(slot); m != freeMeta && !t.dead(m) {
				t.touch(slot, m, c)
				slots[i] = slot
				continue
			}
		}
		hi := t.his[i]
		s, pos, slot, found := t.idx.find(&t.rows, key, hi)
		if found {
			m := t.rows.meta(slot)
			if !t.dead(m) {
				t.touch(slot, m, c)
				slots[i] = slot
				continue
			}
			if !t.admit(key, c) { // an expired row, and the key is not admitted again
				t.removeAt(s, pos, slot, key)
				t.reclaimed++
				slots[i] = NoRow
				continue
			}
			t.fresh(slot, key, c)
			slots[i] = slot
			continue
		}
		if !t.admit(key, c) {
			slots[i] = NoRow
			continue
		}
		slot, ok := t.allocSlot()
		if !ok || !t.idx.insert(hi, slot) {
			if ok {
				t.rows.release(slot)
			}
			return errors.New("dynamic table: a shard holds at most 2^31 rows; add pservers or set a capacity")
		}
		t.fresh(slot, key, c)
		slots[i] = slot
	}
	return nil
}

// touch records c sightings of a live row at the current step.
func (t *Table) touch(slot int32, m uint64, c int) {
	t.preWrite(slot)
	switch t.mode {
	case modeLFU:
		k := int64(m)
		t.hist.add(k, -1)
		k = min(k+int64(c), t.w+lfuSpan)
		t.hist.add(k, 1)
		t.rows.setMeta(slot, uint64(k))
	default:
		if t.mode == modeStep {
			t.hist.add(int64(uint32(m)), -1)
			t.hist.add(int64(t.now), 1)
		}
		t.rows.setMeta(slot, stepMeta(t.now, uint64(m>>32)+uint64(c)))
	}
}

func stepMeta(step uint32, sightings uint64) uint64 {
	return uint64(step) | min(sightings, 0xffffffff)<<32
}

// fresh makes slot key's new row, seen c times at the current step.
func (t *Table) fresh(slot int32, key int64, c int) {
	t.preWrite(slot)
	if t.tracking {
		t.born.set(slot)
	}
	rec := t.rows.rec(slot)
	rec[0] = uint64(key)
	var m uint64
	switch t.mode {
	case modeLFU:
		k := t.w + int64(min(c, lfuSpan))
		t.hist.add(k, 1)
		m = uint64(k)
	case modeStep:
		t.hist.add(int64(t.now), 1)
		fallthrough
	default:
		m = stepMeta(t.now, uint64(c))
	}
	rec[1] = m
	t.initRow(key, floatsOf(rec[2:], t.width))
	t.live++
	t.admitted++
}

// initRow writes key's initial value and state into f.
func (t *Table) initRow(key int64, f []float32) {
	v := f[:t.dim]
	in := &t.cfg.Init
	switch in.Kind {
	case Zeros:
		clear(v)
	case Constant:
		for j := range v {
			v[j] = float32(in.Value)
		}
	case Uniform:
		t.pcg.Seed(t.cfg.Seed, rowStream(key))
		for j := range v {
			v[j] = float32(in.Min + (in.Max-in.Min)*t.rnd.Float64())
		}
	case Normal:
		t.pcg.Seed(t.cfg.Seed, rowStream(key))
		for j := range v {
			v[j] = float32(in.Mean + in.Std*t.rnd.NormFloat64())
		}
	}
	copy(f[t.dim:], t.blank[t.dim:])
}

// admit counts c sightings of a key without a live row and says whether
// it gets one now.
func (t *Table) admit(key int64, c int) bool {
	if t.sk == nil {
		return true
	}
	before, after := t.sk.add(key, c)
	t.skDirty.grow(t.sk.chunks()) // a new generation's chunks
	p := t.cfg.prob()
	for n := max(before+1, t.cfg.MinCount); n <= after; n++ {
		if p >= 1 || admitDraw(t.cfg.Seed, key, n) < p {
			return true
		}
	}
	return false
}

// allocSlot finds a slot for a new row: a free one, else an expired or
// evicted row's found within reclaimScan records, else a new one.
func (t *Table) allocSlot() (int32, bool) {
	if t.rows.free < 0 && int64(t.rows.held()) > t.live {
		for range min(reclaimScan, int(t.rows.hw)) {
			slot := t.next()
			if m := t.rows.meta(slot); m != freeMeta && t.dead(m) {
				t.unindex(slot)
				t.reclaimed++
				return slot, true
			}
		}
	}
	slot, ok := t.rows.alloc()
	if ok {
		t.dirty.grow(int(t.rows.hw))
		t.born.grow(int(t.rows.hw))
	}
	return slot, ok
}

// next returns the record under the hand and moves the hand on.
func (t *Table) next() int32 {
	if t.hand >= t.rows.hw {
		t.hand = 0
	}
	t.hand++
	t.inspected++
	return t.hand - 1
}

// unindex takes the key of slot out of the index (the record stays).
func (t *Table) unindex(slot int32) {
	key := t.rows.key(slot)
	s, pos, _, found := t.idx.find(&t.rows, key, uint32(indexHash(key)>>32))
	if found {
		t.idx.remove(s, pos)
	}
	t.preWrite(slot)
	t.noteRemoved(slot, key)
}

// noteRemoved records the removal of key's row at slot for the next delta,
// unless the row was created after the last cut.
func (t *Table) noteRemoved(slot int32, key int64) {
	if t.tracking && !t.born.has(slot) {
		t.removed = append(t.removed, key)
	}
}

// removeAt removes key's row at slot (entry pos of segment s).
func (t *Table) removeAt(s *segment, pos uint32, slot int32, key int64) {
	t.idx.remove(s, pos)
	t.preWrite(slot)
	t.noteRemoved(slot, key)
	t.rows.release(slot)
}

// lookupChunk is the number of keys a batch lookup resolves together.
const lookupChunk = 64

// resolveHomes finds, for each of keys (at most lookupChunk), the slot of
// its row if the index holds it (-1 if not, or if another key whose hash
// has the same top 32 bits comes first in the probe) into t.homes, and
// its hash's top bits into t.his. A lookup in a large table costs two
// cache misses, an index entry and then a record, which one key at a
// time pays in sequence. Here a group of keys pays them together, in three loops: the
// first asks for every key's home entry (blas.Prefetch), the second reads
// the entries (probing on from home: the home line is cached, a probe
// past it rarely leaves it) and asks for
// the records they point to, the third compares the records' keys. The
// processor keeps many misses in flight where a load waits for each; the
// keys' own lookups then find entries and records in the cache
// (BenchmarkPull, BenchmarkLookupUniform).
func (t *Table) resolveHomes(keys []int64) {
	his, homes := t.his[:len(keys)], t.homes[:len(keys)]
	for j, key := range keys {
		hi := uint32(indexHash(key) >> 32)
		his[j] = hi
		blas.Prefetch(uintptr(unsafe.Pointer(&t.idx.segment(hi).e[hi&segMask])))
	}
	var ents [lookupChunk]uint64
	for j, hi := range his {
		e := t.idx.probe(hi)
		ents[j] = e
		if e != 0 {
			t.rows.prefetch(int32(uint32(e))-1, t.pullBytes)
		}
	}
	for j, e := range ents[:len(keys)] {
		homes[j] = -1
		if e != 0 {
			if slot := int32(uint32(e)) - 1; t.rows.key(slot) == keys[j] {
				homes[j] = slot
			}
		}
	}
}

// findChunk is Find of at most lookupChunk keys.
func (t *Table) findChunk(keys []int64, slots []int32) {
	t.resolveHomes(keys)
	for i, key := range keys {
		slot := t.homes[i]
		if slot < 0 {
			_, _, s, found := t.idx.find(&t.rows, key, t.his[i])
			if !found {
				slots[i] = NoRow
				continue
			}
			slot = s
		}
		if t.deadAt(slot) {
			slot = NoRow
		}
		slots[i] = slot
	}
}

// Find resolves keys to the slots of their live rows, NoRow for the
// others. It changes nothing: no sighting is counted, no row created.
func (t *Table) Find(keys []int64, slots []int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for lo := 0; lo < len(keys); lo += lookupChunk {
		hi := min(lo+lookupChunk, len(keys))
		t.findChunk(keys[lo:hi], slots[lo:hi])
	}
}

// Delete removes the rows of keys (keys without one are ignored).
func (t *Table) Delete(keys []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, key := range keys {
		s, pos, slot, found := t.idx.find(&t.rows, key, uint32(indexHash(key)>>32))
		if !found {
			continue
		}
		if m := t.rows.meta(slot); !t.dead(m) {
			t.live--
			t.deleted++
			if t.mode != modeNone {
				t.hist.add(t.score(m), -1)
			}
		} else {
			t.reclaimed++
		}
		t.removeAt(s, pos, slot, key)
	}
}

// Sweep inspects up to n records, from where the last Sweep stopped,
// and frees those of expired or evicted rows; it returns how many it
// freed. It takes the table's lock for sweepBatch records at a time, and
// does nothing while at most 1/sweepSlack of the held records await
// (admissions reuse the expired rows they meet: at that share one of
// reclaimScan records is expired, on average). Call it every step with a
// bounded n: 65536 records take about 0.2 ms when few are expired, and
// each row freed about 0.2 µs more (BenchmarkSweep, BenchmarkAdmit); it
// inspects about sweepSlack records per row freed in a steady state, not
// n a step (TestSweepKeepsSlack).
func (t *Table) Sweep(n int) int {
	freed := 0
	for n > 0 {
		k := min(n, sweepBatch)
		n -= k
		f, more := t.sweep(k)
		freed += f
		if !more {
			break
		}
	}
	return freed
}

// sweepBatch is the number of records Sweep inspects per hold of the lock.
const sweepBatch = 2048

// sweepSlack: Sweep leaves up to 1/sweepSlack of the held records to
// admissions, so that the rows held stay within sweepSlack/(sweepSlack-1)
// of the live ones plus a step's admissions (1.6% more), and a table
// whose rows expire a few at a time is not scanned whole every few steps
// to find them (a 2x2 job's pserver spent a quarter of its time there).
const sweepSlack = 64

func (t *Table) sweep(n int) (freed int, more bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if held := int64(t.rows.held()); (held-t.live)*sweepSlack <= held {
		return 0, false
	}
	dead := t.sweepBuf[:0]
	for range min(n, int(t.rows.hw)) {
		slot := t.next()
		if m := t.rows.meta(slot); m != freeMeta && t.dead(m) {
			dead = append(dead, slot)
		}
	}
	// Load the dead rows' index entries together (independent loads, which
	// the processor overlaps).
	var acc uint64
	for _, slot := range dead {
		hi := uint32(indexHash(t.rows.key(slot)) >> 32)
		acc += t.idx.segment(hi).e[hi&segMask]
	}
	t.sink = acc
	for _, slot := range dead {
		t.unindex(slot)
		t.rows.release(slot)
		t.reclaimed++
	}
	t.sweepBuf = dead
	return len(dead), true
}
