package trainer

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
)

// tableEntries are the program's dynamic tables as a model file holds
// them, each its keys and rows, streamed from the table while the file is
// written (program.TableEntries: no copy of the rows); names loses the
// tables' own names, whose tensors the entries write.
func tableEntries(p *program.Program, names []string) ([]string, []modelfile.Entry, error) {
	var more []modelfile.Entry
	for _, dt := range p.Lowered {
		es, err := program.TableEntries(dt.Name, p.Tables[dt.Name])
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", dt.Name, err)
		}
		more = append(more, es...)
		names = slices.DeleteFunc(names, func(n string) bool { return n == dt.Name })
	}
	return names, more, nil
}

// saveChains cuts each dynamic table into its chain at step, before the
// node's checkpoint of step is listed (modelfile.Checkpointer.SaveTables).
func saveChains(ck *modelfile.Checkpointer, p *program.Program, step int64) error {
	return ck.SaveTables(step, p.Tables)
}

// restoreChains restores each dynamic table to its chain's step.
func restoreChains(ck *modelfile.Checkpointer, p *program.Program, step int64) error {
	return ck.RestoreTables(step, p.Tables)
}

// tableStats is the state of the program's dynamic tables, in declaration
// order (the Prometheus gauges and counters, the summary line).
func tableStats(p *program.Program) []metrics.TableStats {
	var out []metrics.TableStats
	for _, dt := range p.Lowered {
		st := p.Tables[dt.Name].Stats()
		out = append(out, metrics.TableStats{Table: dt.Name, Live: st.Live, Held: st.Held,
			Admitted: st.Admitted, EvictedTTL: st.EvictedTTL, EvictedCapacity: st.EvictedCapacity, Bytes: st.Bytes.Total()})
	}
	return out
}

// writeTables writes the summary's "tables" member.
func writeTables(b *strings.Builder, tables []metrics.TableStats) {
	if len(tables) == 0 {
		return
	}
	b.WriteString(`,"tables":{`)
	for i, t := range tables {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(t.Table)
		fmt.Fprintf(b, `%s:{"live_rows":%d,"held_rows":%d,"admitted":%d,"evicted_ttl":%d,"evicted_capacity":%d,"bytes":%d}`,
			k, t.Live, t.Held, t.Admitted, t.EvictedTTL, t.EvictedCapacity, t.Bytes)
	}
	b.WriteByte('}')
}

// dynamicEntries are the model file's tensors of dynamic table t, pulled
// from its shards at the job's end (step at) as the file is written: the
// keys T.keys (int64 [n]) and their rows T (float32 [n, dim]), shard
// after shard, each shard's in ascending key order. It first asks every
// shard for its row count (the file's header needs n); it returns n.
func dynamicEntries(ctx context.Context, c Comm, t table, at int64) ([]modelfile.Entry, int, error) {
	counts := make([]int, t.shards)
	n := 0
	word := make([]float32, 2)
	for s := range t.shards {
		if err := c.Pull(ctx, s, t.name, comm.Pull{At: at, Final: true, Count: true}, word); err != nil {
			return nil, 0, fmt.Errorf("pulling the row count of dynamic table %s from pserver-%d: %w", t.name, s, err)
		}
		counts[s] = int(binary.LittleEndian.Uint64(tensor.F32Bytes(word)))
		n += counts[s]
	}
	// write streams the shards' keys (keys) or rows, per entries at a time.
	write := func(w io.Writer, keys bool) error {
		per, width := comm.PullRows(t.width), t.width
		if keys {
			per, width = comm.DynamicPullKeys(t.width), 2
		}
		buf := make([]float32, per*width)
		for s := range t.shards {
			for lo := 0; lo < counts[s]; lo += per {
				k := min(per, counts[s]-lo)
				req := comm.Pull{At: at, Final: true, First: lo, N: k, ReplyKeys: keys}
				if err := c.Pull(ctx, s, t.name, req, buf[:k*width]); err != nil {
					return fmt.Errorf("pulling rows of dynamic table %s from pserver-%d: %w", t.name, s, err)
				}
				if _, err := w.Write(tensor.F32Bytes(buf[:k*width])); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return []modelfile.Entry{
		{Name: dyntable.KeysName(t.name), DType: tensor.I64, Shape: []int{n}, Write: func(w io.Writer) error { return write(w, true) }},
		{Name: t.name, DType: tensor.F32, Shape: []int{n, t.width}, Write: func(w io.Writer) error { return write(w, false) }},
	}, n, nil
}

// keepKeys keeps the keys of a dynamic table's request to shard to (its
// n keys, then their n counts, which an evaluation does not count).
func (r *pullRendezvous) keepKeys(to ir.Node, table string, payload []byte) {
	if r.keys[to] == nil {
		r.keys[to] = map[string][]int64{}
	}
	n := len(payload) / 12
	keys := r.keys[to][table][:0]
	for i := range n {
		keys = append(keys, int64(binary.LittleEndian.Uint64(payload[8*i:])))
	}
	r.keys[to][table] = keys
}

// pullKeys pulls the rows of the keys kept for shard from of dynamic
// table t into dst, DynamicPullKeyList at a time, as of step at.
func (r *pullRendezvous) pullKeys(ctx context.Context, from ir.Node, t table, dst []byte) (int, error) {
	keys := r.keys[from][t.name]
	out := tensor.F32View(dst)
	per := comm.DynamicPullKeyList(t.width)
	for lo := 0; lo < len(keys); lo += per {
		hi := min(lo+per, len(keys))
		req := comm.Pull{At: r.at, Final: r.final, KeyList: keys[lo:hi]}
		if err := r.c.Pull(ctx, from.Index, t.name, req, out[lo*t.width:hi*t.width]); err != nil {
			return 0, fmt.Errorf("pulling rows of dynamic table %s from %s for the held-out evaluation: %w", t.name, from, err)
		}
	}
	return 4 * len(keys) * t.width, nil
}
