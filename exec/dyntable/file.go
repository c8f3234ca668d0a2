package dyntable

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/psgraph/psgraph/internal/safetensors"
)

// Layout is what a cut's file holds.
type Layout uint8

const (
	// Checkpoint holds everything Apply needs to continue bitwise: keys,
	// values, state, meta, removed keys, the admission sketch and the
	// table's scalars.
	Checkpoint Layout = iota
	// Model holds keys and values: what evaluation and prediction read
	// (program.ReadTable).
	Model
	// ModelWithState adds the optimizer state.
	ModelWithState
)

// KeysName is the tensor holding table name's keys (int64 [n]) in every
// file of a table, a model file's included; the tensor name itself holds
// their rows (float32 [n, dim]).
func KeysName(name string) string { return name + ".keys" }

// FormatVersion is the "psgraph.dyntable" metadata of the files this
// package writes.
const FormatVersion = "2"

// The tensors of a cut's file, for a table named <name> holding n rows
// (docs: doc.go, "Files"):
//
//	<name>.keys           I64 [n]        the keys
//	<name>                F32 [n, dim]   their values
//	<name>.state          F32 [n, state] optimizer state (Checkpoint, ModelWithState)
//	<name>.meta           U64 [n]        last-seen step | sightings<<32, or LFU priority (Checkpoint)
//	<name>.removed        I64 [r]        keys removed since the previous cut (Checkpoint, deltas)
//	<name>.sketch_chunks  I64 [m]        admission sketch chunks (Checkpoint with admission)
//	<name>.sketch         U8  [m, 1024]  their bytes
//
// and in __metadata__ the table's configuration and scalars.

// WriteSafetensors writes the cut as a safetensors file into w (from
// offset 0; an *os.File, or an atomicfile.File) and returns its size. It
// takes the table's lock only a batch at a time. A cut is written once;
// Commit it after the file is durable, or Abort it.
func (c *Cut) WriteSafetensors(w io.WriterAt, name string, layout Layout) (size int64, err error) {
	if layout == Checkpoint && c.kind == Export {
		return 0, errors.New("dynamic table: an export is written as a model file; take a Snapshot for a checkpoint")
	}
	if err := c.start(); err != nil {
		return 0, err
	}
	defer func() { c.finish(err == nil) }()
	t := c.t
	d, sw := int64(t.dim), int64(t.width-t.dim)
	n, err := c.count()
	if err != nil {
		return 0, err
	}
	ckpt := layout == Checkpoint
	tensors := []safetensors.Tensor{tensorOf(KeysName(name), "I64", n), tensorOf(name, "F32", n, d)}
	if !ckpt && layout != ModelWithState {
		sw = 0
	}
	if sw > 0 {
		tensors = append(tensors, tensorOf(name+".state", "F32", n, sw))
	}
	if ckpt {
		tensors = append(tensors, tensorOf(name+".meta", "U64", n))
	}
	if ckpt || c.kind == Delta {
		tensors = append(tensors, tensorOf(name+".removed", "I64", int64(len(c.removed))))
	}
	m := int64(c.chunkCount())
	if ckpt && t.sk != nil {
		tensors = append(tensors, tensorOf(name+".sketch_chunks", "I64", m), tensorOf(name+".sketch", "U8", m, chunkBytes))
	}
	l, err := safetensors.Encode(tensors, c.metadata(name, layout, sw))
	if err != nil {
		return 0, err
	}
	at := starts(tensors, l)
	if _, err := w.WriteAt(l.Header, 0); err != nil {
		return 0, err
	}
	if ckpt && t.sk != nil {
		ids := make([]int64, 0, m)
		sk := at[name+".sketch"]
		err := c.eachChunk(func(i int, b []byte) error {
			ids = append(ids, int64(i))
			_, err := w.WriteAt(b, sk)
			sk += int64(len(b))
			return err
		})
		if err != nil {
			return 0, err
		}
		if int64(len(ids)) != m {
			return 0, fmt.Errorf("dynamic table %s: internal error: %d sketch chunks written of %d", name, len(ids), m)
		}
		if _, err := w.WriteAt(bytesOf(ids), at[name+".sketch_chunks"]); err != nil {
			return 0, err
		}
	} else {
		c.skipSketch()
	}
	put := func(name string, b []byte) error {
		o, ok := at[name]
		if !ok {
			return nil
		}
		_, err := w.WriteAt(b, o)
		at[name] = o + int64(len(b))
		return err
	}
	got, err := c.eachRow(func(b *Batch) error {
		if err := put(KeysName(name), bytesOf(b.Keys)); err != nil {
			return err
		}
		if err := put(name, bytesOf(b.Values)); err != nil {
			return err
		}
		if err := put(name+".state", bytesOf(b.State)); err != nil {
			return err
		}
		return put(name+".meta", bytesOf(b.Meta))
	})
	if err != nil {
		return 0, err
	}
	if got != n {
		return 0, fmt.Errorf("dynamic table %s: internal error: %d rows written of %d", name, got, n)
	}
	if err := put(name+".removed", bytesOf(c.removed)); err != nil {
		return 0, err
	}
	return l.Size, nil
}

// Each hands an Export's rows to fn batch by batch (a custom sink:
// another format, a socket); it takes the table's lock a batch at a time,
// and reuses the batch's slices after fn returns. It is called once per
// cut. Snapshots and deltas, which also carry the sketch and the removed
// keys, are written with WriteSafetensors.
func (c *Cut) Each(fn func(b *Batch) error) error {
	if c.kind != Export {
		return errors.New("dynamic table: Each writes exports; write a snapshot or a delta with WriteSafetensors")
	}
	if err := c.start(); err != nil {
		return err
	}
	c.skipSketch()
	_, err := c.eachRow(fn)
	c.finish(err == nil)
	return err
}

func (c *Cut) metadata(name string, layout Layout, stateWidth int64) map[string]string {
	t := c.t
	cfg := &t.cfg
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	m := map[string]string{
		"psgraph.dyntable": FormatVersion,
		"table":            name,
		"kind":             c.kind.String(),
		"layout":           [...]string{"checkpoint", "model", "model+state"}[layout],
		"dim":              i(int64(t.dim)),
		"state_width":      i(stateWidth),
		"step":             i(int64(c.step)),
		"seq":              u(c.seq),
		"base":             u(c.base),
	}
	if layout != Checkpoint {
		return m
	}
	for k, v := range configMeta(cfg) {
		m[k] = v
	}
	m["sketch_bytes"] = i(int64(c.skChunks) * chunkBytes)
	m["sketch_keys"] = i(c.skKeys)
	m["watermark"] = i(c.w)
	m["live"] = i(c.live)
	for k, name := range counterNames {
		m[name] = u(c.counters[k])
	}
	return m
}

var counterNames = [5]string{"admitted", "evicted_ttl", "evicted_capacity", "deleted", "reclaimed"}

// configMeta is what a checkpoint records of the configuration, and what
// Apply requires of the table it restores into.
func configMeta(cfg *Config) map[string]string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return map[string]string{
		"seed":       strconv.FormatUint(cfg.Seed, 10),
		"min_count":  strconv.Itoa(cfg.MinCount),
		"admit_prob": f(cfg.AdmitProb),
		"ttl_steps":  strconv.FormatInt(cfg.TTL, 10),
		"capacity":   strconv.Itoa(cfg.Capacity),
		"evict":      cfg.Evict.String(),
		// the bound of the admission sketch (0: none), whose generations
		// a restore grows through to the file's sketch_bytes
		"sketch_limit": strconv.Itoa(cfg.sketchLimit()),
	}
}

// Apply restores a checkpoint file written by WriteSafetensors
// (Checkpoint layout) into the table: a snapshot into a new table, then
// each delta after it, in order. The table must have the configuration
// of the one that wrote it. The file is checked before anything is
// applied (its header, shapes, configuration and place in the chain); a
// read error or a malformed row while applying leaves the table part
// restored, to be discarded.
func (t *Table) Apply(r io.ReaderAt, size int64, name string) error {
	f, err := safetensors.Decode(r, size, "dynamic table "+name)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut != nil {
		return errors.New("dynamic table: cannot restore while a cut is open")
	}
	sc, err := t.checkChain(f)
	if err != nil {
		return err
	}
	ts, err := t.tensorsOf(f, name, sc)
	if err != nil {
		return err
	}
	// The scalars first: rows already here that the watermark kills die.
	t.now = uint32(sc.step)
	t.raise(sc.w)
	if t.sk != nil {
		t.sk.growTo(int(sc.skBytes)) // checked: it reaches them
		t.skDirty.grow(t.sk.chunks())
		t.sk.keys = sc.skKeys
	}
	if err := t.applyFile(f, ts, sc.step); err != nil {
		return err
	}
	t.admitted, t.evictedTTL, t.evictedCap, t.deleted, t.reclaimed = sc.counters[0], sc.counters[1], sc.counters[2], sc.counters[3], sc.counters[4]
	t.seq, t.base, t.tracking = sc.seq, sc.base, true
	clear(t.dirty)
	clear(t.born)
	clear(t.skDirty)
	t.removed = t.removed[:0]
	if t.live != sc.live {
		return fmt.Errorf("%s: the table holds %d live rows after it, the file says %d: the files do not belong together", f.What(), t.live, sc.live)
	}
	return nil
}

// chainScalars are the scalars of a checkpoint file's metadata.
type chainScalars struct {
	kind          string
	step, w, live int64
	seq, base     uint64
	counters      [5]uint64
	// the admission sketch's bytes at the cut and the keys of its newest
	// generation
	skBytes, skKeys int64
}

// checkChain checks a checkpoint file's metadata against the table: its
// format, layout and configuration, and its place in the chain the table
// was restored along so far; it returns the file's scalars.
func (t *Table) checkChain(f *safetensors.File) (chainScalars, error) {
	var sc chainScalars
	what, meta := f.What(), f.Meta
	if meta["psgraph.dyntable"] != FormatVersion {
		if v := meta["psgraph.dyntable"]; v == "1" {
			// Format 1 had a fixed 1 MiB admission sketch; its checkpoints
			// do not say how far a growing sketch got. Its model files
			// (layout "model") are read as before.
			return sc, fmt.Errorf("%s is a checkpoint of dynamic-table format 1, written by an earlier psgraph; format %s's admission sketch grows, and a format-1 chain cannot be resumed: resume it with the psgraph that wrote it, or start a new run from its saved model (--init-from MODEL.safetensors)", what, FormatVersion)
		}
		return sc, fmt.Errorf("%s is not a dynamic table file of format %s (metadata %q)", what, FormatVersion, meta["psgraph.dyntable"])
	}
	if meta["layout"] != "checkpoint" {
		return sc, fmt.Errorf("%s is a %s file; a table restores from checkpoint files (read a model file with LoadModel)", what, meta["layout"])
	}
	want := configMeta(&t.cfg)
	want["dim"], want["state_width"] = strconv.Itoa(t.dim), strconv.Itoa(t.width-t.dim)
	for _, k := range sortedKeys(want) {
		if meta[k] != want[k] {
			return sc, fmt.Errorf("%s was written by a table with %s %s; this table has %s (restore with the model's configuration, or start afresh)", what, k, meta[k], want[k])
		}
	}
	unum := func(k string) (uint64, error) {
		v, err := strconv.ParseUint(meta[k], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: metadata %s %q is not a number", what, k, meta[k])
		}
		return v, nil
	}
	var err error
	for _, x := range []struct {
		k string
		v *int64
	}{{"step", &sc.step}, {"watermark", &sc.w}, {"live", &sc.live}, {"sketch_bytes", &sc.skBytes}, {"sketch_keys", &sc.skKeys}} {
		if *x.v, err = strconv.ParseInt(meta[x.k], 10, 64); err != nil {
			return sc, fmt.Errorf("%s: metadata %s %q is not a number", what, x.k, meta[x.k])
		}
	}
	for _, x := range []struct {
		k string
		v *uint64
	}{{"seq", &sc.seq}, {"base", &sc.base}} {
		if *x.v, err = unum(x.k); err != nil {
			return sc, err
		}
	}
	for k, name := range counterNames {
		if sc.counters[k], err = unum(name); err != nil {
			return sc, err
		}
	}
	sc.kind = meta["kind"]
	kind := sc.kind
	switch {
	case kind == "snapshot" && (t.rows.hw != 0 || t.tracking):
		return sc, fmt.Errorf("%s is a snapshot: restore it into a new table", what)
	case kind == "snapshot" && sc.base != sc.seq:
		return sc, fmt.Errorf("%s: a snapshot of chain %d numbered %d", what, sc.base, sc.seq)
	case kind == "delta" && !t.tracking:
		return sc, fmt.Errorf("%s is a delta: restore its snapshot first", what)
	case kind == "delta" && (sc.base != t.base || sc.seq != t.seq+1):
		return sc, fmt.Errorf("%s is delta %d after snapshot %d; this table was restored up to cut %d after snapshot %d: apply the files in order", what, sc.seq, sc.base, t.seq, t.base)
	case kind != "snapshot" && kind != "delta":
		return sc, fmt.Errorf("%s: unknown kind %q", what, kind)
	case sc.step < int64(t.now) || sc.step > maxStep:
		return sc, fmt.Errorf("%s is of step %d; this table is at step %d", what, sc.step, t.now)
	case sc.w < t.w:
		return sc, fmt.Errorf("%s has eviction watermark %d below this table's %d", what, sc.w, t.w)
	case t.sk == nil && sc.skBytes != 0, t.sk != nil && (sc.skBytes > int64(t.sk.limit) || !t.sk.reaches(int(sc.skBytes))), sc.skKeys < 0:
		return sc, fmt.Errorf("%s: an admission sketch of %d bytes (%d keys in its newest part), which this table's (%d bytes, at most %d) does not grow to", what, sc.skBytes, sc.skKeys, t.skBytes(), t.cfg.sketchLimit())
	}
	return sc, nil
}

// fileTensors are the tensors of a checkpoint file, checked against the
// table's widths, and the ids of its sketch chunks.
type fileTensors struct {
	keys, vals, state, metas, removed, chunks safetensors.Entry
	n, d, sw                                  int64
	ids                                       []int64
}

// tensorsOf finds a checkpoint file's tensors of table name and checks
// their shapes (and the sketch chunk ids) before anything is applied.
func (t *Table) tensorsOf(f *safetensors.File, name string, sc chainScalars) (*fileTensors, error) {
	ts := &fileTensors{d: int64(t.dim), sw: int64(t.width - t.dim)}
	var err error
	if ts.keys, err = f.Want(KeysName(name), "I64", -1); err != nil {
		return nil, err
	}
	ts.n = ts.keys.Shape[0]
	if ts.vals, err = f.Want(name, "F32", ts.n, ts.d); err != nil {
		return nil, err
	}
	if ts.sw > 0 {
		if ts.state, err = f.Want(name+".state", "F32", ts.n, ts.sw); err != nil {
			return nil, err
		}
	}
	if ts.metas, err = f.Want(name+".meta", "U64", ts.n); err != nil {
		return nil, err
	}
	if ts.removed, err = f.Want(name+".removed", "I64", -1); err != nil {
		return nil, err
	}
	if t.sk == nil {
		return ts, nil
	}
	chunkIDs, err := f.Want(name+".sketch_chunks", "I64", -1)
	if err != nil {
		return nil, err
	}
	m := chunkIDs.Shape[0]
	if ts.chunks, err = f.Want(name+".sketch", "U8", m, chunkBytes); err != nil {
		return nil, err
	}
	chunks := sc.skBytes / chunkBytes
	if sc.kind == "snapshot" && m != chunks {
		return nil, fmt.Errorf("%s: a snapshot of %d sketch chunks for a sketch of %d", f.What(), m, chunks)
	}
	ts.ids = make([]int64, m)
	if err := f.Read(chunkIDs, 0, bytesOf(ts.ids)); err != nil {
		return nil, err
	}
	for _, id := range ts.ids {
		if id < 0 || id >= chunks {
			return nil, fmt.Errorf("%s: sketch chunk %d of a sketch of %d", f.What(), id, chunks)
		}
	}
	return ts, nil
}

// applyFile applies a checked checkpoint file of step: its removals, its
// rows and its sketch chunks, a batch of rows at a time.
func (t *Table) applyFile(f *safetensors.File, ts *fileTensors, step int64) error {
	removed, n, d, sw := ts.removed, ts.n, ts.d, ts.sw
	rm := make([]int64, min(removed.Shape[0], cutBatch))
	for at := int64(0); at < removed.Shape[0]; at += int64(len(rm)) {
		b := rm[:min(int64(len(rm)), removed.Shape[0]-at)]
		if err := f.Read(removed, at*8, bytesOf(b)); err != nil {
			return err
		}
		for _, key := range b {
			t.applyRemove(key)
		}
	}
	bk := make([]int64, min(n, cutBatch))
	bm := make([]uint64, len(bk))
	bv := make([]float32, len(bk)*int(d))
	bs := make([]float32, len(bk)*int(sw))
	for at := int64(0); at < n; at += int64(len(bk)) {
		k := min(int64(len(bk)), n-at)
		if err := f.Read(ts.keys, at*8, bytesOf(bk[:k])); err != nil {
			return err
		}
		if err := f.Read(ts.metas, at*8, bytesOf(bm[:k])); err != nil {
			return err
		}
		if err := f.Read(ts.vals, at*4*d, bytesOf(bv[:k*d])); err != nil {
			return err
		}
		if err := f.Read(ts.state, at*4*sw, bytesOf(bs[:k*sw])); err != nil {
			return err
		}
		for i := range k {
			if bm[i] == freeMeta || t.dead(bm[i]) {
				return fmt.Errorf("%s: row %d (key %d) was not live at step %d (meta %#x)", f.What(), at+i, bk[i], step, bm[i])
			}
			if err := t.applyRow(bk[i], bm[i], bv[i*d:(i+1)*d], bs[i*sw:(i+1)*sw]); err != nil {
				return err
			}
		}
	}
	if t.sk != nil {
		b := make([]byte, chunkBytes)
		for i, id := range ts.ids {
			if err := f.Read(ts.chunks, int64(i)*chunkBytes, b); err != nil {
				return err
			}
			copy(t.sk.b[id<<chunkBits:], b)
		}
	}
	return nil
}

func (t *Table) applyRemove(key int64) {
	s, pos, slot, found := t.idx.find(&t.rows, key, uint32(indexHash(key)>>32))
	if !found {
		return
	}
	if m := t.rows.meta(slot); !t.dead(m) {
		t.live--
		if t.mode != modeNone {
			t.hist.add(t.score(m), -1)
		}
	}
	t.idx.remove(s, pos)
	t.rows.release(slot)
}

// applyRow sets key's row to the given meta, values and state.
func (t *Table) applyRow(key int64, meta uint64, vals, state []float32) error {
	hi := uint32(indexHash(key) >> 32)
	_, _, slot, found := t.idx.find(&t.rows, key, hi)
	if found {
		if m := t.rows.meta(slot); !t.dead(m) {
			t.live--
			if t.mode != modeNone {
				t.hist.add(t.score(m), -1)
			}
		}
	} else {
		var ok bool
		if slot, ok = t.allocSlot(); !ok || !t.idx.insert(hi, slot) {
			return errors.New("dynamic table: a shard holds at most 2^31 rows")
		}
	}
	rec := t.rows.rec(slot)
	rec[0], rec[1] = uint64(key), meta
	f := floatsOf(rec[2:], t.width)
	copy(f, vals)
	copy(f[t.dim:], state)
	t.live++
	if t.mode != modeNone {
		t.hist.add(t.score(meta), 1)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
