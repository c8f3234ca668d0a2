package dyntable

import (
	"errors"
	"fmt"
)

// A serving replica follows a split job's dynamic tables (psgraph serve
// --plan; docs/serving.md): each pserver publishes the rows of its shard
// that steps wrote, with their keys and meta, and its watermark; the
// replica keeps every shard's rows in one table, a mirror, which its
// programs Read as they read a table loaded from a model file.
//
// On the pserver (the publishing side), Publish makes the owner's
// writes leave the slots they wrote in a list the publisher takes after
// each step (Written); ReadSlots and ReadRange copy rows out by slot, and
// Watermark is the shard's eviction watermark. Evictions by ttl or
// capacity are not listed key by key: a row is dead when its score is at
// or under its shard's watermark, on the pserver and on the mirror alike
// (a row's meta travels with it), so a watermark sent with each delta
// removes on the replica exactly the rows the pserver evicted, in O(1)
// however many they are.
//
// On the replica, NewMirror makes the table; MirrorRows writes rows as
// their shard holds them (creating the keys it lacks), Expire sets a
// shard's watermark, DropShard forgets a shard's rows (its pserver
// restarted, and its full state follows), and SweepMirror frees the
// memory of dead rows.

// pubSlots is the slots the owner wrote since the publisher last took
// them: a bit per slot against duplicates, and their list.
type pubSlots struct {
	bits bitset
	list []int32
}

func (p *pubSlots) mark(slot int32, hw int32) {
	if int(slot>>6) >= len(p.bits) {
		p.bits.grow(int(hw) + pageRows)
	}
	if !p.bits.has(slot) {
		p.bits.set(slot)
		p.list = append(p.list, slot)
	}
}

// Publish starts (on) or stops keeping the slots the owner writes for a
// publisher (Written). Any goroutine may call it.
func (t *Table) Publish(on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case on && t.pub == nil:
		t.pub = &pubSlots{}
	case !on:
		t.pub = nil
	}
}

// Written appends to dst the slots written since the last call (since
// Publish started) and forgets them; the publisher calls it on the
// owner's goroutine between steps.
func (t *Table) Written(dst []int32) []int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pub
	if p == nil {
		return dst
	}
	for _, s := range p.list {
		p.bits[s>>6] &^= 1 << (s & 63)
	}
	dst = append(dst, p.list...)
	p.list = p.list[:0]
	return dst
}

// Watermark is the shard's eviction watermark: a row whose score (its
// last-seen step, or its LFU priority) is at or under it is dead.
func (t *Table) Watermark() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.w
}

// ReadSlots appends to b the live rows of slots (key, meta and value;
// slots freed or holding a dead row since are skipped). Any goroutine may
// call it.
func (t *Table) ReadSlots(slots []int32, b *Batch) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range slots {
		if s >= 0 && s < t.rows.hw {
			t.appendRow(s, b)
		}
	}
}

// ReadRange appends to b the live rows of slots [lo, lo+n) and returns
// the slot after them, or -1 past the last slot. Any goroutine may call
// it: reading a table whole takes its lock n slots at a time.
func (t *Table) ReadRange(lo, n int32, b *Batch) int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	hi := min(t.rows.hw, lo+n)
	for s := lo; s < hi; s++ {
		t.appendRow(s, b)
	}
	if hi >= t.rows.hw {
		return -1
	}
	return hi
}

func (t *Table) appendRow(s int32, b *Batch) {
	m := t.rows.meta(s)
	if m == freeMeta || t.dead(m) {
		return
	}
	b.Keys = append(b.Keys, t.rows.key(s))
	b.Meta = append(b.Meta, m)
	b.Values = append(b.Values, t.rows.floats(s)[:t.dim]...)
}

// mirror is a mirror table's view of the shards it holds: each shard's
// watermark.
type mirror struct {
	w []int64
}

// NewMirror makes a serving replica's table holding the rows of every
// shard of a table split over shards pservers, whose shards have
// configuration cfg (its Dim, Default and eviction rule, which says what
// a row's meta scores; admission and optimizer state do not apply).
func NewMirror(cfg Config, shards int) (*Table, error) {
	if shards <= 0 {
		return nil, fmt.Errorf("dynamic table: a mirror of %d shards", shards)
	}
	cfg.StateWidth, cfg.StateInit = 0, nil
	cfg.MinCount, cfg.AdmitProb = 0, 0
	t, err := New(cfg)
	if err != nil {
		return nil, err
	}
	t.mirror = &mirror{w: make([]int64, shards)}
	for i := range t.mirror.w {
		t.mirror.w[i] = t.w
	}
	t.w = -1 // the rows die by their shard's watermark, never the table's
	return t, nil
}

// MirrorShards is the count of shards a mirror holds (0: not a mirror).
func (t *Table) MirrorShards() int {
	if t.mirror == nil {
		return 0
	}
	return len(t.mirror.w)
}

// deadAt says whether slot's row is dead: by the table's watermark, or a
// mirror's by its shard's.
func (t *Table) deadAt(slot int32) bool {
	m := t.rows.meta(slot)
	if t.mirror != nil {
		return t.mirror.dead(t, t.rows.key(slot), m)
	}
	return t.dead(m)
}

func (mr *mirror) dead(t *Table, key int64, m uint64) bool {
	if t.mode == modeNone {
		return false
	}
	return t.score(m) <= mr.w[ShardOf(key, len(mr.w))]
}

var errNotMirror = errors.New("dynamic table: not a mirror (NewMirror)")

// MirrorRows writes b's rows (keys, meta, values) as their shards hold
// them, creating the rows of keys the mirror lacks.
func (t *Table) MirrorRows(b *Batch) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mirror == nil {
		return errNotMirror
	}
	if len(b.Meta) != len(b.Keys) || len(b.Values) != len(b.Keys)*t.dim {
		return fmt.Errorf("dynamic table: %d keys, %d metas and %d values of rows of %d", len(b.Keys), len(b.Meta), len(b.Values), t.dim)
	}
	for i, key := range b.Keys {
		hi := uint32(indexHash(key) >> 32)
		_, _, slot, found := t.idx.find(&t.rows, key, hi)
		if !found {
			var ok bool
			if slot, ok = t.rows.alloc(); !ok || !t.idx.insert(hi, slot) {
				return errors.New("dynamic table: a mirror holds at most 2^31 rows")
			}
			t.live++
		}
		rec := t.rows.rec(slot)
		rec[0], rec[1] = uint64(key), b.Meta[i]
		copy(floatsOf(rec[2:], t.width), b.Values[i*t.dim:(i+1)*t.dim])
	}
	return nil
}

// Expire sets shard's watermark: its rows whose score is at or under w
// are dead from now on.
func (t *Table) Expire(shard int, w int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mirror == nil {
		return errNotMirror
	}
	if shard < 0 || shard >= len(t.mirror.w) {
		return fmt.Errorf("dynamic table: shard %d of a mirror of %d", shard, len(t.mirror.w))
	}
	t.mirror.w[shard] = w
	return nil
}

// DropShard removes every row of shard (a scan of the table).
func (t *Table) DropShard(shard int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mirror == nil {
		return errNotMirror
	}
	n := len(t.mirror.w)
	for s := int32(0); s < t.rows.hw; s++ {
		if t.rows.meta(s) != freeMeta && ShardOf(t.rows.key(s), n) == shard {
			t.freeMirrored(s)
		}
	}
	return nil
}

// SweepMirror inspects up to n records, from where the last stopped, and
// frees those of dead rows; it returns how many it freed.
func (t *Table) SweepMirror(n int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mirror == nil || t.mode == modeNone {
		return 0
	}
	freed := 0
	for range min(n, int(t.rows.hw)) {
		s := t.next()
		if t.rows.meta(s) != freeMeta && t.deadAt(s) {
			t.freeMirrored(s)
			freed++
		}
	}
	return freed
}

func (t *Table) freeMirrored(s int32) {
	key := t.rows.key(s)
	if seg, pos, _, found := t.idx.find(&t.rows, key, uint32(indexHash(key)>>32)); found {
		t.idx.remove(seg, pos)
	}
	t.rows.release(s)
	t.live--
	t.reclaimed++
}
