package dyntable

// Stats is a table's state for metrics (per table and pserver: Prometheus
// gauges and counters) and the summary line.
type Stats struct {
	Step int64
	// Live is the number of rows a lookup finds; Held the rows in memory
	// (Live plus expired or evicted rows that Sweep has not freed yet).
	Live, Held int64
	// Cumulative counts: keys admitted (a row created), rows evicted by
	// ttl and by capacity, rows deleted, and expired rows whose memory was
	// reclaimed (by Sweep, by an admission reusing it, or by a lookup of
	// their key).
	Admitted, EvictedTTL, EvictedCapacity, Deleted, Reclaimed uint64
	// Bytes is the memory the table holds, by part.
	Bytes Bytes
}

// Bytes is a table's memory by part. Keys, Values, State and Meta are
// the pages' records (allocated a page of 1024 rows at a time: free
// slots included); Index the hash index; Sketch the admission sketch;
// Other the bookkeeping (dirty sets, eviction histogram, a cut's copies).
type Bytes struct {
	Keys, Values, State, Meta, Index, Sketch, Other int64
}

// Total is the sum of the parts.
func (b Bytes) Total() int64 {
	return b.Keys + b.Values + b.State + b.Meta + b.Index + b.Sketch + b.Other
}

// Stats returns the table's state.
func (t *Table) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Stats{
		Step: int64(t.now), Live: t.live, Held: int64(t.rows.held()),
		Admitted: t.admitted, EvictedTTL: t.evictedTTL, EvictedCapacity: t.evictedCap,
		Deleted: t.deleted, Reclaimed: t.reclaimed,
	}
	slots := int64(len(t.rows.pages)) * pageRows
	pages := t.rows.bytes()
	s.Bytes.Keys = 8 * slots
	s.Bytes.Values = 4 * int64(t.dim) * slots
	s.Bytes.State = 4 * int64(t.width-t.dim) * slots
	s.Bytes.Meta = pages - s.Bytes.Keys - s.Bytes.Values - s.Bytes.State // meta and padding
	s.Bytes.Index = t.idx.bytes()
	if t.sk != nil {
		s.Bytes.Sketch = int64(len(t.sk.b))
	}
	s.Bytes.Other = int64(len(t.dirty)+len(t.born)+len(t.skDirty)+len(t.spare[0])+len(t.spare[1])+len(t.spare[2]))*8 + t.hist.bytes() + int64(cap(t.removed))*8
	if c := t.cut; c != nil {
		s.Bytes.Other += int64(len(c.arena.chunks)+len(c.arena.ready))*arenaRecords*int64(t.rows.stride)*8 +
			int64(len(c.saved)+len(c.countedBefore)+len(c.rows)+len(c.born)+len(c.chunks))*8 + int64(len(c.skSaved))*24
		for _, b := range c.skSaved {
			s.Bytes.Other += int64(len(b))
		}
	}
	return s
}

// skBytes is the admission sketch's memory (0: none).
func (t *Table) skBytes() int {
	if t.sk == nil {
		return 0
	}
	return len(t.sk.b)
}
