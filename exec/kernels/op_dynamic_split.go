package kernels

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/tensor"
)

// A dynamic table in a split job (docs/split.md, "Dynamic tables"): the
// trainer's fetch_rows and send_rows of a table of shape [dynamic, D]
// (dispatched from op_table.go) move keys, not local rows; each pserver's
// shard is a dyntable.Table served by dyn_serve and updated through
// dyn_accumulate, dyn_gather and dyn_scatter.
//
// The messages (docs/wire.md): a request T@ids to shard s is the n
// distinct keys of the trainer's batch that dyntable.ShardOf places on s
// (int64) then their occurrence counts (uint32), 12n bytes; the reply
// T@rows their n rows of D float32 (the default vector for a key without
// a row); a row gradient T@GRAD is n keys (int64) then their n rows of D
// float32, 8n + 4nD bytes.

func init() {
	register("dyn_serve", dynServeKernel)
	register("dyn_accumulate", dynAccumulateKernel)
}

// i64View returns b's memory as int64s, without copying (little-endian
// hosts; b's start 8-byte aligned, as the buffers here are).
func i64View(b []byte) []int64 {
	if len(b) < 8 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(&b[0])), len(b)/8)
}

// u32View returns b's memory as uint32s, without copying.
func u32View(b []byte) []uint32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// remoteOf is the step's key index of dynamic table v on a trainer (no
// storage: its rows live on the pservers).
func remoteOf(k Args, v string) (*Dynamic, error) {
	d := k.Dynamic[v]
	if d == nil {
		return nil, fmt.Errorf("dynamic table %s has no key index on this node (compile the program with its dynamic tables)", v)
	}
	return d, nil
}

// dynFetchKernel is fetch_rows of a dynamic table: its Start finds the
// batch's distinct keys and their counts and sends each shard its own,
// its Finish receives their rows into positions 0..n-1.
func dynFetchKernel(k Args) (Split, error) {
	out, v := k.Out[0], k.Attrs.String("var")
	d, err := remoteOf(k, v)
	if err != nil {
		return Split{}, err
	}
	m, w := k.Attrs.Int("shards"), out.RowWidth()
	maxKeys := cap(out.Rows.IDs)
	d.size(maxKeys)
	req := make([][]byte, m)    // shard s's keys, then their counts
	pos := make([][]int32, m)   // their positions in d.keys
	got := make([][]float32, m) // the rows shard s answered
	for s := range m {
		req[s] = make([]byte, 12*maxKeys)
		pos[s] = make([]int32, 0, maxKeys)
		got[s] = make([]float32, maxKeys*w)
	}
	idsVar, rowsVar := ops.TableIDs(v), ops.TableRows(v)
	start := func(rt Runtime) error {
		d.addInputs(k.In)
		out.Rows.Identity(len(d.keys))
		for s := range m {
			pos[s] = pos[s][:0]
		}
		for i, key := range d.keys {
			s := dyntable.ShardOf(key, m)
			pos[s] = append(pos[s], int32(i))
		}
		out.Fit()
		for s := range m {
			c := len(pos[s])
			keys, counts := i64View(req[s][:8*c]), u32View(req[s][8*c:12*c])
			for j, p := range pos[s] {
				keys[j], counts[j] = d.keys[p], d.counts[p]
			}
			if err := rt.Rendezvous().Send(rt.Context(), rt.Step(), ir.PServer(s), idsVar, ir.Rows, req[s][:12*c]); err != nil {
				return err
			}
		}
		return nil
	}
	what := "keys of dynamic table " + v
	finish := func(rt Runtime) error {
		return recvShardRows(rt, rowsVar, got, pos, out.F, w, what)
	}
	return Split{Start: start, Finish: finish}, nil
}

// dynSendRowsKernel is send_rows of a dynamic table's row gradient: each
// shard gets the keys it holds (the fetched rows' keys) and their rows.
func dynSendRowsKernel(k Args) (Kernel, error) {
	g, gv := k.In[0], k.Attrs.String("var")
	v := strings.TrimSuffix(gv, ops.GradSuffix)
	d, err := remoteOf(k, v)
	if err != nil {
		return nil, err
	}
	m, w := k.Attrs.Int("shards"), g.RowWidth()
	maxRows := cap(g.Rows.IDs)
	bufs := make([][]byte, m)
	for s := range m {
		bufs[s] = make([]byte, maxRows*(8+4*w))
	}
	counts := make([]int, m)
	shard := make([]int32, maxRows)
	return func(rt Runtime) error {
		clear(counts)
		for i, id := range g.Rows.IDs {
			s := dyntable.ShardOf(d.keys[id], m)
			shard[i] = int32(s)
			counts[s]++
		}
		for s := range m {
			c := counts[s]
			kb, vb := i64View(bufs[s][:8*c]), tensor.F32View(bufs[s][8*c:c*(8+4*w)])
			n := 0
			for i, id := range g.Rows.IDs {
				if int(shard[i]) != s {
					continue
				}
				kb[n] = d.keys[id]
				copy(vb[n*w:(n+1)*w], g.F[i*w:(i+1)*w])
				n++
			}
			if err := rt.Rendezvous().Send(rt.Context(), rt.Step(), ir.PServer(s), gv, ir.Rows, bufs[s][:c*(8+4*w)]); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// shardSpec is what a pserver's dynamic shard accepts: keys ShardOf
// places on shard of shards, at most maxRows per message.
type shardSpec struct {
	table          string // the table, for messages
	shard, shards  int
	maxRows, width int
}

// shardSpecOf reads dyn_serve's and dyn_accumulate's attributes (the
// latter's transfer is the table's gradient).
func shardSpecOf(k Args) shardSpec {
	return shardSpec{table: strings.TrimSuffix(k.Attrs.String("transfer"), ops.GradSuffix), shard: k.Attrs.Int("shard"), shards: k.Attrs.Int("shards"),
		maxRows: k.Attrs.Int("max_rows"), width: k.Attrs.Int("dim")}
}

// checkKeys checks that keys belong to this shard: what a peer sends is
// checked before anything of it is applied.
func (sp shardSpec) checkKeys(src int, keys []int64, what string) error {
	for _, key := range keys {
		if key == ir.PadKey {
			return fmt.Errorf("trainer-%d sent the padding key in %s of dynamic table %s; nothing was applied (the trainer sends corrupt keys)", src, what, sp.table)
		}
		if s := dyntable.ShardOf(key, sp.shards); s != sp.shard {
			return fmt.Errorf("trainer-%d sent key %d in %s of dynamic table %s to shard %d of %d, but the key belongs to shard %d; nothing was applied (the trainer runs another plan, or sends corrupt keys)", src, key, what, sp.table, sp.shard, sp.shards, s)
		}
	}
	return nil
}

// request checks a request of n bytes in b and returns its keys and counts.
func (sp shardSpec) request(src int, b []byte, n int) ([]int64, []uint32, error) {
	if n%12 != 0 {
		return nil, nil, fmt.Errorf("trainer-%d sent a request for rows of dynamic table %s of %d bytes, not whole keys and counts (12 bytes each); nothing was served (the trainer runs another plan, or sends corrupt keys)", src, sp.table, n)
	}
	c := n / 12
	keys, counts := i64View(b[:8*c]), u32View(b[8*c:12*c])
	if err := sp.checkKeys(src, keys, "a request"); err != nil {
		return nil, nil, err
	}
	for i, x := range counts {
		if x == 0 {
			return nil, nil, fmt.Errorf("trainer-%d sent key %d of dynamic table %s with a count of 0 sightings; nothing was served (the trainer sends corrupt counts)", src, keys[i], sp.table)
		}
	}
	return keys, counts, nil
}

func dynServeKernel(k Args) (Kernel, error) {
	d, _, err := dynamicOf(k)
	if err != nil {
		return nil, err
	}
	sp := shardSpecOf(k)
	count := k.Attrs.Int("count")
	idsVar, rowsVar, gradVar := ops.TableIDs(sp.table), ops.TableRows(sp.table), ops.GradName(sp.table)
	either := []string{gradVar, idsVar} // a pending gradient first: requests read the newest rows
	trainers := k.Node.TrainerCount()
	reqs := make([][]byte, trainers)
	sizes := make([]int, trainers)
	replies := make([][]float32, trainers) // kept until written, as serve_rows's
	for t := range trainers {
		reqs[t] = make([]byte, 12*sp.maxRows)
		replies[t] = make([]float32, sp.maxRows*sp.width)
	}
	slots := make([][]int32, trainers) // each request's, from its Lookup
	for t := range slots {
		slots[t] = make([]int32, sp.maxRows)
	}
	var missed missedKeys
	missed.size(sp.maxRows)
	// reply sends trainer src the rows of keys, whose slots their Lookup
	// gave; in sync mode a key without a row then may have been admitted
	// by a later request of the step, so those are found again (refind).
	reply := func(rt Runtime, src int, step int64, keys []int64, slots []int32, refind bool) error {
		if refind {
			missed.refind(d.Table, keys, slots)
		}
		rows := replies[src][:len(keys)*sp.width]
		if err := d.Table.Gather(slots, 0, sp.width, rows); err != nil {
			return err
		}
		return rt.Rendezvous().Send(rt.Context(), step, ir.Trainer(src), rowsVar, ir.F32, f32Bytes(rows))
	}
	// The table moves to the step once a request of it arrived: a loop
	// that starts a step after the job's end (its receive fails) must not
	// expire rows of the last one.
	advance := func(rt Runtime) error {
		if err := d.Table.Advance(rt.Step()); err != nil {
			return fmt.Errorf("%s: %w", sp.table, err)
		}
		return nil
	}
	return func(rt Runtime) error {
		if !k.Node.Async && count == trainers {
			// Every request is checked, then every sighting counted, then
			// every reply read: a key admitted by the step's sightings reads
			// its row in each trainer's reply, as one node's batch would.
			for t := range trainers {
				n, err := rt.Rendezvous().Recv(rt.Context(), rt.Step(), ir.Trainer(t), idsVar, reqs[t])
				if err != nil {
					return err
				}
				if _, _, err := sp.request(t, reqs[t], n); err != nil {
					return err
				}
				sizes[t] = n
			}
			if err := advance(rt); err != nil {
				return err
			}
			for t := range trainers {
				keys, counts, _ := sp.request(t, reqs[t], sizes[t])
				if err := d.Table.Lookup(keys, counts, slots[t][:len(keys)]); err != nil {
					return fmt.Errorf("%s: %w", sp.table, err)
				}
			}
			for t := range trainers {
				keys, _, _ := sp.request(t, reqs[t], sizes[t])
				if err := reply(rt, t, rt.Step(), keys, slots[t][:len(keys)], t < trainers-1); err != nil {
					return err
				}
			}
			return nil
		}
		// Async: requests as they come until a row gradient is pending
		// (serve_rows says why).
		for {
			next, err := rt.Server().Pending(rt.Context(), either)
			if err != nil {
				return err
			}
			if next == gradVar {
				return nil
			}
			n, src, step, err := rt.Server().RecvAny(rt.Context(), idsVar, reqs[0])
			if err != nil {
				return err
			}
			keys, counts, err := sp.request(src.Index, reqs[0], n)
			if err != nil {
				return err
			}
			if err := advance(rt); err != nil {
				return err
			}
			if err := d.Table.Lookup(keys, counts, slots[0][:len(keys)]); err != nil {
				return fmt.Errorf("%s: %w", sp.table, err)
			}
			if err := reply(rt, src.Index, step, keys, slots[0][:len(keys)], false); err != nil {
				return err
			}
		}
	}, nil
}

// missedKeys finds again the keys a Lookup left without a row.
type missedKeys struct {
	keys  []int64
	at    []int32 // their places in the request
	slots []int32
}

func (m *missedKeys) size(n int) {
	m.keys, m.at, m.slots = make([]int64, 0, n), make([]int32, 0, n), make([]int32, n)
}

// refind sets the slots of keys that have none (NoRow) to their rows'
// now, if they have one.
func (m *missedKeys) refind(t *dyntable.Table, keys []int64, slots []int32) {
	m.keys, m.at = m.keys[:0], m.at[:0]
	for i, s := range slots {
		if s == dyntable.NoRow {
			m.keys, m.at = append(m.keys, keys[i]), append(m.at, int32(i))
		}
	}
	if len(m.keys) == 0 {
		return
	}
	t.Find(m.keys, m.slots[:len(m.keys)])
	for j, i := range m.at {
		slots[i] = m.slots[j]
	}
}

func dynAccumulateKernel(k Args) (Kernel, error) {
	d, _, err := dynamicOf(k)
	if err != nil {
		return nil, err
	}
	sp := shardSpecOf(k)
	out := k.Out[0]
	count, w := k.Attrs.Int("count"), sp.width
	d.size(count * sp.maxRows)
	row := 8 + 4*w
	bufs := make([][]byte, count)
	sizes := make([]int, count)
	srcs := make([]int, count)
	at := make([][]int32, count) // each piece's keys' positions
	for t := range bufs {
		bufs[t] = make([]byte, sp.maxRows*row)
		at[t] = make([]int32, sp.maxRows)
	}
	gradVar := k.Attrs.String("transfer")
	piece := func(t int) ([]int64, []float32) {
		n := sizes[t] / row
		return i64View(bufs[t][:8*n]), tensor.F32View(bufs[t][8*n : n*row])
	}
	return func(rt Runtime) error {
		// Every piece is checked before any is merged: a bad one applies nothing.
		for t := range count {
			var err error
			if sizes[t], srcs[t], err = recvPiece(rt, k, count, t, gradVar, bufs[t]); err != nil {
				return err
			}
			if sizes[t]%row != 0 {
				return fmt.Errorf("trainer-%d sent a row gradient of dynamic table %s of %d bytes, not whole rows of width %d (8 bytes of key + %d of values each); nothing was applied", srcs[t], sp.table, sizes[t], w, 4*w)
			}
			keys, _ := piece(t)
			if err := sp.checkKeys(srcs[t], keys, "a row gradient"); err != nil {
				return err
			}
		}
		// The step's keys in order of arrival are the rows' positions; the
		// gradient is their mean over the pieces, in trainer order.
		// addAll keeps each key's position (checkKeys refused PadKey).
		d.reset()
		for t := range count {
			keys, _ := piece(t)
			d.addAll(keys, at[t][:len(keys)])
		}
		n := len(d.keys)
		out.Rows.Identity(n)
		out.Fit()
		clear(out.F)
		for t := range count {
			keys, vals := piece(t)
			for i, p := range at[t][:len(keys)] {
				dst := out.F[int(p)*w : (int(p)+1)*w]
				for j, x := range vals[i*w : (i+1)*w] {
					dst[j] += x
				}
			}
		}
		if count > 1 {
			inv := 1 / float32(count)
			for i := range out.F {
				out.F[i] *= inv
			}
		}
		// Keys without a row (not admitted, or evicted since) read the
		// default in dyn_gather and are skipped by dyn_scatter.
		d.Table.Find(d.keys, d.slots[:n])
		return nil
	}, nil
}
