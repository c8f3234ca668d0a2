package dyntable

// A row's columns: Gather and Scatter by slot, several column ranges in
// one pass (GatherCols, ScatterCols), and the values by key (Pull, Read).

import "fmt"

func (t *Table) checkCols(col, width, n, have int) error {
	if col < 0 || width < 0 || col+width > t.width {
		return fmt.Errorf("dynamic table: columns [%d, %d) of rows of %d (dim %d + state %d)", col, col+width, t.width, t.dim, t.width-t.dim)
	}
	if have < n*width {
		return fmt.Errorf("dynamic table: a buffer of %d floats for %d rows of width %d", have, n, width)
	}
	return nil
}

func (t *Table) checkSlot(slot int32) error {
	if slot >= t.rows.hw || t.rows.meta(slot) == freeMeta {
		return fmt.Errorf("dynamic table: slot %d holds no row (a slot is valid until the next Advance, Sweep or Delete)", slot)
	}
	return nil
}

// checkSlots checks every slot but NoRow before Gather or Scatter copies
// a row: a loop of independent loads of the records, which the processor
// overlaps (bench/history-2026-12.md); the copies then find them in the
// cache.
func (t *Table) checkSlots(slots []int32) error {
	for _, slot := range slots {
		if slot >= 0 {
			if err := t.checkSlot(slot); err != nil {
				return err
			}
		}
	}
	return nil
}

// Gather copies columns [col, col+width) of each slot's row (value
// columns first, then state) into dst, row after row; a NoRow slot reads
// the default row (Config.Default, then Config.StateInit).
func (t *Table) Gather(slots []int32, col, width int, dst []float32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.checkCols(col, width, len(slots), len(dst)); err != nil {
		return err
	}
	if err := t.checkSlots(slots); err != nil {
		return err
	}
	for i, slot := range slots {
		out := dst[i*width : (i+1)*width]
		if slot < 0 {
			copy(out, t.blank[col:col+width])
			continue
		}
		copy(out, t.rows.floats(slot)[col:col+width])
	}
	return nil
}

// Scatter writes columns [col, col+width) of each slot's row from src,
// row after row; NoRow slots are skipped (their gradient is dropped).
func (t *Table) Scatter(slots []int32, col, width int, src []float32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.checkCols(col, width, len(slots), len(src)); err != nil {
		return err
	}
	if err := t.checkSlots(slots); err != nil {
		return err
	}
	for i, slot := range slots {
		if slot < 0 {
			continue
		}
		t.preWrite(slot)
		copy(t.rows.floats(slot)[col:col+width], src[i*width:(i+1)*width])
	}
	return nil
}

// Cols is a range of a row's columns, [Col, Col+Width), and a buffer of
// rows of Width floats, one a slot (GatherCols, ScatterCols).
type Cols struct {
	Col, Width int
	F          []float32
}

// GatherCols is Gather of each of cols in one pass over the slots: a
// record is checked and read once for all of them.
func (t *Table) GatherCols(slots []int32, cols []Cols) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.checkAll(slots, cols); err != nil {
		return err
	}
	for i, slot := range slots {
		src := t.blank
		if slot >= 0 {
			src = t.rows.floats(slot)
		}
		for _, c := range cols {
			copy(c.F[i*c.Width:(i+1)*c.Width], src[c.Col:c.Col+c.Width])
		}
	}
	return nil
}

// ScatterCols is Scatter of each of cols in one pass over the slots.
func (t *Table) ScatterCols(slots []int32, cols []Cols) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.checkAll(slots, cols); err != nil {
		return err
	}
	for i, slot := range slots {
		if slot < 0 {
			continue
		}
		t.preWrite(slot)
		dst := t.rows.floats(slot)
		for _, c := range cols {
			copy(dst[c.Col:c.Col+c.Width], c.F[i*c.Width:(i+1)*c.Width])
		}
	}
	return nil
}

// checkAll checks cols and every slot before a GatherCols or ScatterCols
// touches a row, in a loop of independent loads of the records (see
// Gather) that reads a word of each of a record's cache lines (a record
// of dim 16 and 16 floats of state spans three): the copies then find
// every line in the cache, where loading the first line only left the
// others to miss one copy at a time. In a table of 2M rows, GatherCols
// and ScatterCols of value and state by 128 slots took 162-175 cpu-ns a
// key loading one line, 84-146 loading all (six runs each, alternating,
// 2026-12-05; a benchmark function written for it and not kept). The
// same in Gather and Scatter of whole batches measured no gain
// (BenchmarkUpdate: 156-180 before, 181-212 after, two runs each).
func (t *Table) checkAll(slots []int32, cols []Cols) error {
	for _, c := range cols {
		if err := t.checkCols(c.Col, c.Width, len(slots), len(c.F)); err != nil {
			return err
		}
	}
	var acc uint64
	for _, slot := range slots {
		if slot >= 0 {
			if err := t.checkSlot(slot); err != nil {
				return err
			}
			rec := t.rows.rec(slot)
			for w := 1; w < len(rec); w += 8 { // word 1 is the meta; a line holds 8 words
				acc += rec[w]
			}
		}
	}
	t.sink = acc // the compiler must keep the loads
	return nil
}

// Pull is Lookup followed by Gather of the values: dst gets len(keys)
// rows of Dim floats, the default row for keys without one.
func (t *Table) Pull(keys []int64, counts []uint32, slots []int32, dst []float32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.checkCols(0, t.dim, len(keys), len(dst)); err != nil {
		return err
	}
	return t.lookup(keys, counts, slots, dst)
}

// Read copies the values of keys' rows into dst (the default row for keys
// without one) and changes nothing: the lookup of evaluation and
// prediction.
func (t *Table) Read(keys []int64, dst []float32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.checkCols(0, t.dim, len(keys), len(dst)); err != nil {
		return err
	}
	d := t.dim
	slots := t.readSlots[:0]
	for lo := 0; lo < len(keys); lo += lookupChunk {
		hi := min(lo+lookupChunk, len(keys))
		slots = slots[:hi-lo]
		t.findChunk(keys[lo:hi], slots)
		t.copyValues(slots, dst[lo*d:hi*d])
	}
	return nil
}
