package trainer

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/tensor"
)

// Trainer 0 of a job with sharded lookup tables reads table rows from the
// pservers outside the steps (comm.Pull): the rows each chunk of its
// held-out evaluation looks up, and, to save the whole model, every row
// of every table, chunk by chunk, straight into the file.

// table is a sharded lookup table as a trainer sees it: rows x width,
// row r held by pserver r mod shards as its local row r div shards.
type table struct {
	name                string
	rows, width, shards int
	// dynamic: a dynamic table (rows is ir.DynamicRows), sharded by key.
	dynamic bool
	// bundle: the transfer of the bundle the table's fetch is part of
	// (ops.TableBundle; "": none), order its place in the bundle.
	bundle string
	order  int
}

// tablesOf lists the sharded tables the trainer's graph fetches rows of,
// from its transfer table ts at batch.
func tablesOf(g *dsl.Graph, batch int, ts []dsl.Transfer) (map[string]table, error) {
	types, err := g.Infer(batch)
	if err != nil {
		return nil, err
	}
	out := map[string]table{}
	for _, t := range ts {
		if t.Kind != dsl.TableRowsTransfer || !t.Recv {
			continue
		}
		if t.Tables != nil { // a bundle's: every table of it
			for i, tb := range t.Tables {
				out[tb.Name] = table{name: tb.Name, rows: types[t.Op.Outputs[i]].Shape[0], width: tb.Width, shards: t.Op.Attrs.Int("shards"), bundle: t.Table, order: i}
			}
			continue
		}
		name := t.Op.Attrs.String("var")
		rows := types[t.Op.Outputs[0]].Shape[0]
		out[name] = table{name: name, rows: rows, width: t.Shape[1], shards: t.Op.Attrs.Int("shards"), dynamic: rows == ir.DynamicRows}
	}
	return out, nil
}

// pullRendezvous is the rendezvous of trainer 0's held-out evaluation in
// a job with tables: the evaluation's fetch_rows sends each shard the ids
// of its chunk and receives their rows; here the ids are kept and the rows
// pulled, PullRows at a time, as of step at (final: the job's end).
type pullRendezvous struct {
	c      Comm
	tables map[string]table
	byIDs  map[string]string // a table's ids transfer -> the table
	byRows map[string]string // its rows transfer -> the table
	// bundles lists the tables of each bundle by its ids and by its rows
	// transfer, in message order.
	bundles map[string][]string
	ids     map[ir.Node]map[string][]int32
	keys    map[ir.Node]map[string][]int64 // a dynamic table's (its requests' keys)
	scratch []int32                        // decode's
	at      int64
	final   bool
}

func newPullRendezvous(c Comm, tables map[string]table) *pullRendezvous {
	r := &pullRendezvous{c: c, tables: tables, byIDs: map[string]string{}, byRows: map[string]string{}, ids: map[ir.Node]map[string][]int32{},
		keys: map[ir.Node]map[string][]int64{}}
	r.bundles = map[string][]string{}
	for name, t := range tables {
		r.byIDs[ops.TableIDs(name)] = name
		r.byRows[ops.TableRows(name)] = name
		if t.bundle == "" {
			continue
		}
		for _, v := range []string{ops.TableIDs(t.bundle), ops.TableRows(t.bundle)} {
			b := r.bundles[v]
			for len(b) <= t.order {
				b = append(b, "")
			}
			b[t.order] = name
			r.bundles[v] = b
		}
	}
	return r
}

// sendBundle keeps each table's ids of a bundled request (every table's
// count, then their ids: fetch_tables).
func (r *pullRendezvous) sendBundle(to ir.Node, names []string, payload []byte) error {
	ids := r.decode(payload)
	if len(ids) < len(names) || len(payload)%4 != 0 {
		return fmt.Errorf("a bundled request of %d bytes for %d tables", len(payload), len(names))
	}
	at := len(names)
	for i, name := range names {
		c := int(ids[i])
		if c < 0 || at+c > len(ids) {
			return fmt.Errorf("a bundled request of %d bytes: table %s's count %d does not fit", len(payload), name, c)
		}
		r.keepIDs(to, name, ids[at:at+c])
		at += c
	}
	return nil
}

func (r *pullRendezvous) keepIDs(to ir.Node, name string, ids []int32) {
	if r.ids[to] == nil {
		r.ids[to] = map[string][]int32{}
	}
	r.ids[to][name] = append(r.ids[to][name][:0], ids...)
}

var errEvalSends = fmt.Errorf("the held-out evaluation of a job with tables only fetches table rows")

func (r *pullRendezvous) Send(_ context.Context, _ int64, to ir.Node, v string, _ ir.DType, payload []byte) error {
	if names, ok := r.bundles[v]; ok {
		return r.sendBundle(to, names, payload)
	}
	t, ok := r.byIDs[v]
	if !ok {
		return fmt.Errorf("send %s: %w", v, errEvalSends)
	}
	if r.tables[t].dynamic {
		r.keepKeys(to, t, payload)
		return nil
	}
	r.keepIDs(to, t, r.decode(payload))
	return nil
}

// decode reads a request's int32 ids into the rendezvous's scratch
// (valid until the next decode).
func (r *pullRendezvous) decode(payload []byte) []int32 {
	r.scratch = r.scratch[:0]
	for i := 0; i+4 <= len(payload); i += 4 {
		r.scratch = append(r.scratch, int32(binary.LittleEndian.Uint32(payload[i:])))
	}
	return r.scratch
}

func (r *pullRendezvous) Recv(ctx context.Context, _ int64, from ir.Node, v string, dst []byte) (int, error) {
	if names, ok := r.bundles[v]; ok { // each table's rows in turn
		n := 0
		for _, name := range names {
			k, err := r.recv(ctx, from, name, dst[n:])
			if err != nil {
				return 0, err
			}
			n += k
		}
		return n, nil
	}
	name, ok := r.byRows[v]
	if !ok {
		return 0, fmt.Errorf("recv %s: %w", v, errEvalSends)
	}
	return r.recv(ctx, from, name, dst)
}

// recv pulls from the rows of table name that the evaluation's request
// asked for, into dst.
func (r *pullRendezvous) recv(ctx context.Context, from ir.Node, name string, dst []byte) (int, error) {
	t := r.tables[name]
	if t.dynamic {
		return r.pullKeys(ctx, from, t, dst)
	}
	ids := r.ids[from][name]
	out := tensor.F32View(dst)
	per := comm.PullRows(t.width)
	for lo := 0; lo < len(ids); lo += per {
		hi := min(lo+per, len(ids))
		req := comm.Pull{At: r.at, Final: r.final, IDs: ids[lo:hi]}
		if err := r.c.Pull(ctx, from.Index, name, req, out[lo*t.width:hi*t.width]); err != nil {
			return 0, fmt.Errorf("pulling rows of %s from %s for the held-out evaluation: %w", name, from, err)
		}
	}
	return 4 * len(ids) * t.width, nil
}

var _ kernels.Rendezvous = (*pullRendezvous)(nil)

// tableEntry is a whole table of the saved model, pulled from its shards
// as of the job's end (step at) chunk by chunk as the file is written:
// each chunk's global rows, PullRows of them, are pulled from every shard
// at once and interleaved, so the trainer holds two chunks, never the
// table.
func tableEntry(ctx context.Context, c Comm, t table, at int64) modelfile.Entry {
	return modelfile.Entry{Name: t.name, DType: tensor.F32, Shape: []int{t.rows, t.width}, Write: func(w io.Writer) error {
		per := comm.PullRows(t.width)
		chunk := make([]float32, per*t.width)
		shard := make([][]float32, t.shards)
		for s := range shard {
			shard[s] = make([]float32, ((per+t.shards-1)/t.shards)*t.width)
		}
		errs := make([]error, t.shards)
		for a := 0; a < t.rows; a += per {
			b := min(a+per, t.rows)
			// shard s holds the global rows s, s+M, ...: of [a, b) the
			// local rows [first(s, a), first(s, b)).
			first := func(s, g int) int { return max(0, (g-s+t.shards-1)/t.shards) }
			var wg sync.WaitGroup
			for s := range t.shards {
				lo, hi := first(s, a), first(s, b)
				if hi <= lo {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := comm.Pull{At: at, Final: true, First: lo, N: hi - lo}
					errs[s] = c.Pull(ctx, s, t.name, req, shard[s][:(hi-lo)*t.width])
				}()
			}
			wg.Wait()
			for s, err := range errs {
				if err != nil {
					return fmt.Errorf("pulling rows of %s from pserver-%d: %w", t.name, s, err)
				}
			}
			for g := a; g < b; g++ {
				s, l := g%t.shards, g/t.shards-first(g%t.shards, a)
				copy(chunk[(g-a)*t.width:(g-a+1)*t.width], shard[s][l*t.width:(l+1)*t.width])
			}
			if _, err := w.Write(tensor.F32Bytes(chunk[:(b-a)*t.width])); err != nil {
				return err
			}
		}
		return nil
	}}
}
