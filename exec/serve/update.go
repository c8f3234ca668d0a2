package serve

import (
	"fmt"
	"time"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
)

// rowsReader is Model.rows held for reading around a program's reads of
// table rows (program.Runtime.Tables), timing the waits (RowsWait).
type rowsReader Model

func (r *rowsReader) Lock() {
	if r.rows.TryRLock() {
		return
	}
	t := time.Now()
	r.rows.RLock()
	r.rowsWait.Add(int64(time.Since(t)))
}

func (r *rowsReader) Unlock() { r.rows.RUnlock() }

// RowsWait is the seconds requests have waited, in all, for updates
// writing table rows (Apply) before they could compute.
func (m *Model) RowsWait() float64 { return float64(m.rowsWait.Load()) / 1e9 }

// Update is what a followed job's pservers applied since the update
// before: the training step it brings the model to, new values of dense
// parameters, the changed rows of fixed and dynamic tables, and the
// state of the dynamic tables' shards.
type Update struct {
	Step   int64
	Dense  []DenseValues
	Rows   []TableRows
	Shards []ShardState
}

// ShardState is a pserver's shard of a dynamic table: its eviction
// watermark (its rows scored at or under it are dead), and Whole when
// the update holds every row of the shard (a pserver's full state: the
// rows the model held of the shard before are forgotten first).
type ShardState struct {
	Name          string
	Shard, Shards int
	Watermark     int64
	Whole         bool
}

// DenseValues are new values of a dense parameter from element Offset
// (a pserver holds a block of it).
type DenseValues struct {
	Name   string
	Offset int
	Values []float32
}

// TableRows are changed rows of a table: of a fixed table by row id
// (IDs), of a dynamic table by key (Keys, each with its Meta: what its
// eviction scores, dyntable's mirror.go); Values holds the rows one after
// another.
type TableRows struct {
	Name   string
	IDs    []int64
	Keys   []int64
	Meta   []uint64
	Values []float32
}

// Apply brings the model to u.Step without failing or blocking a request
// for long: the dense parameters are written into a shadow version (the
// one before the current, once no request uses it, its values first made
// the current one's), given the programs the current one's requests use
// (warm), and swapped in whole, so a request computes with one version of
// them; table rows are written in place, rowsPerHold at a time between
// two reads of table rows by programs (Model.rows), so a row is never
// read half-written and a request may see rows newer than its dense
// version, never older; the rows of a shard sent whole are replaced in
// one hold (no request sees the shard missing).
func (m *Model) Apply(u Update) error {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	cur := m.cur.Load()
	if err := m.checkUpdate(cur, u); err != nil {
		return err
	}
	shadow := m.spare
	if shadow == nil {
		shadow = m.shadowOf(cur)
	} else {
		for shadow.refs.Load() > 0 { // the requests still on it are short
			time.Sleep(50 * time.Microsecond)
		}
		for name, t := range cur.Tensors {
			if !m.tables[name] {
				copy(shadow.Tensors[name].F, t.F)
			}
		}
	}
	for _, d := range u.Dense {
		copy(shadow.Tensors[d.Name].F[d.Offset:], d.Values)
	}
	m.warm(shadow, cur) // the programs cur's requests use, ready before it is
	whole := false
	for _, sh := range u.Shards {
		whole = whole || sh.Whole
	}
	if whole { // a shard replaced: dropped and written again in one hold, so no request sees it missing
		m.rows.Lock()
		defer m.rows.Unlock()
		for _, sh := range u.Shards {
			if sh.Whole {
				if err := cur.Tables[sh.Name].DropShard(sh.Shard); err != nil {
					return fmt.Errorf("update of step %d: dynamic table %s: %w", u.Step, sh.Name, err)
				}
			}
		}
	}
	for _, r := range u.Rows {
		if err := m.writeRows(cur, r, !whole); err != nil {
			return fmt.Errorf("update of step %d: %w", u.Step, err)
		}
	}
	if !whole && len(u.Shards) > 0 {
		m.rows.Lock()
		defer m.rows.Unlock()
	}
	for _, sh := range u.Shards {
		if err := cur.Tables[sh.Name].Expire(sh.Shard, sh.Watermark); err != nil {
			return fmt.Errorf("update of step %d: dynamic table %s: %w", u.Step, sh.Name, err)
		}
	}
	shadow.Version = u.Step
	m.cur.Store(shadow)
	m.spare = cur
	return nil
}

// rowsPerHold is the table rows an update writes per hold of Model.rows
// (64 KiB of a 16-wide table's rows: a few microseconds), so a request's
// table reads wait at most that long for an update.
const rowsPerHold = 1024

// writeRows writes table rows r of an update, held (the caller holds
// Model.rows) or a few hundred rows a hold of it (rowsPerHold).
func (m *Model) writeRows(cur *version, r TableRows, chunked bool) error {
	n, per := len(r.IDs), rowsPerHold
	dyn := cur.Tables[r.Name]
	if dyn != nil {
		n = len(r.Keys)
	}
	if !chunked {
		per = max(n, 1)
	}
	for lo := 0; lo < n; lo += per {
		hi := min(n, lo+per)
		if chunked {
			m.rows.Lock()
		}
		var err error
		if dyn != nil {
			w := dyn.Config().Dim
			err = dyn.MirrorRows(&dyntable.Batch{Keys: r.Keys[lo:hi], Meta: r.Meta[lo:hi], Values: r.Values[lo*w : hi*w]})
		} else {
			t := cur.Tensors[r.Name]
			w := t.Shape[1]
			for i, id := range r.IDs[lo:hi] {
				copy(t.F[int(id)*w:int(id+1)*w], r.Values[(lo+i)*w:(lo+i+1)*w])
			}
		}
		if chunked {
			m.rows.Unlock()
		}
		if err != nil {
			return fmt.Errorf("dynamic table %s: %w", r.Name, err)
		}
	}
	return nil
}

// checkUpdate refuses an update that does not fit the model: it would
// write outside a tensor.
func (m *Model) checkUpdate(cur *version, u Update) error {
	for _, d := range u.Dense {
		t, ok := cur.Tensors[d.Name]
		if !ok || m.tables[d.Name] || t.DType != tensor.F32 || d.Offset < 0 || d.Offset+len(d.Values) > len(t.F) {
			return fmt.Errorf("update of step %d: %d values of dense parameter %q from %d do not fit the model", u.Step, len(d.Values), d.Name, d.Offset)
		}
	}
	for _, sh := range u.Shards {
		t, ok := cur.Tables[sh.Name]
		if !ok {
			return fmt.Errorf("update of step %d: the model has no dynamic table %q", u.Step, sh.Name)
		}
		if n := t.MirrorShards(); n != sh.Shards || sh.Shard < 0 || sh.Shard >= sh.Shards {
			return fmt.Errorf("update of step %d: shard %d of %d of dynamic table %q does not fit the model, which follows it over %d pservers", u.Step, sh.Shard, sh.Shards, sh.Name, n)
		}
	}
	for _, r := range u.Rows {
		if t, ok := cur.Tables[r.Name]; ok {
			if r.IDs != nil || len(r.Meta) != len(r.Keys) || len(r.Values) != len(r.Keys)*t.Config().Dim {
				return fmt.Errorf("update of step %d: %d keys of dynamic table %q do not fit the model", u.Step, len(r.Keys), r.Name)
			}
			continue
		}
		t, ok := cur.Tensors[r.Name]
		if !ok || !m.tables[r.Name] || r.Keys != nil || len(r.Values) != len(r.IDs)*t.Shape[1] {
			return fmt.Errorf("update of step %d: %d rows of table %q do not fit the model", u.Step, len(r.IDs), r.Name)
		}
		for _, id := range r.IDs {
			if id < 0 || int(id) >= t.Shape[0] {
				return fmt.Errorf("update of step %d: row %d of table %q is outside its %d rows", u.Step, id, r.Name, t.Shape[0])
			}
		}
	}
	return nil
}

// shadowOf is a second version beside cur: its own copies of the dense
// parameters, the same tables.
func (m *Model) shadowOf(cur *version) *version {
	ts := program.Scope{}
	for name, t := range cur.Tensors {
		if m.tables[name] {
			ts[name] = t
			continue
		}
		c := tensor.New(t.DType, t.Shape)
		copy(c.F, t.F)
		copy(c.I, t.I)
		copy(c.L, t.L)
		ts[name] = c
	}
	p := cur.Params
	p.Tensors = ts
	return newVersion(p)
}

// fixedTables names the parameters that ops read rows of (lookup_table,
// embedding_bag): their tensors are written in place by updates, shared
// by every version.
func fixedTables(g *dsl.Graph) map[string]bool {
	out := map[string]bool{}
	for _, op := range g.Ops {
		if ops.ReadsTable(op.Type) && len(op.Inputs) > 0 {
			out[op.Inputs[0]] = true
		}
	}
	return out
}
