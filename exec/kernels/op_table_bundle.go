package kernels

import (
	"encoding/binary"
	"fmt"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/tensor"
)

// The kernels of the bundled table ops (dsl/ops/op_table.go; docs/wire.md,
// "Table bundles"): one message per trainer, pserver, step and direction
// for every fixed table of a split job. A request is every table's count
// of ids (int32, in the op's table order), then the tables' local ids in
// turn; a reply the tables' rows in turn; a row gradient every table's
// count of rows, then each table's local rows (int32) and their values.
// Each part is what fetch_rows, serve_rows, send_rows and accumulate_rows
// move for that table, and is checked the same way: a message that does
// not add up applies and answers nothing.

func init() {
	registerSplit("fetch_tables", fetchTablesKernel)
	register("send_tables", sendTablesKernel)
	register("serve_tables", serveTablesKernel)
	register("accumulate_tables", accumulateTablesKernel)
}

// fetchTablesKernel's Start sends each shard one request for every
// table's ids it owns; its Finish receives each shard's reply and copies
// every table's rows to its output.
func fetchTablesKernel(k Args) (Split, error) {
	v, m := k.Attrs.String("var"), k.Attrs.Int("shards")
	groups := k.Attrs.Ints("inputs")
	nt := len(k.Out)
	if len(groups) != nt {
		return Split{}, fmt.Errorf("fetch_tables: %d id groups for %d tables", len(groups), nt)
	}
	most, width := 0, 0 // ids and values of one shard's reply, at most
	for _, out := range k.Out {
		most += cap(out.Rows.IDs)
		width += cap(out.Rows.IDs) * out.RowWidth()
	}
	req := make([][]int32, m)     // shard s's request: counts, then ids
	slots := make([][][]int32, m) // [s][t]: the slots in table t's output of shard s's rows
	got := make([][]float32, m)   // shard s's reply
	for s := range m {
		req[s] = make([]int32, 0, nt+most)
		slots[s] = make([][]int32, nt)
		for t, out := range k.Out {
			slots[s][t] = make([]int32, 0, cap(out.Rows.IDs))
		}
		got[s] = make([]float32, width)
	}
	idsVar, rowsVar := ops.TableIDs(v), ops.TableRows(v)
	start := func(rt Runtime) error {
		in := k.In
		for t, out := range k.Out {
			rows, height := out.Rows, out.Shape[0]
			rows.Reset()
			for _, x := range in[:groups[t]] {
				for i, id := range x.I {
					if id < 0 {
						continue // padding of an embedding_bag
					}
					if int(id) >= height {
						return idRange(i, id, height, x.Shape)
					}
					rows.Add(id)
				}
			}
			in = in[groups[t]:]
			out.Fit()
			for s := range m {
				slots[s][t] = slots[s][t][:0]
			}
			for slot, id := range rows.IDs {
				s := int(id) % m
				slots[s][t] = append(slots[s][t], int32(slot))
			}
		}
		for s := range m {
			r := req[s][:nt]
			for t, out := range k.Out {
				r[t] = int32(len(slots[s][t]))
				for _, slot := range slots[s][t] {
					r = append(r, out.Rows.IDs[slot]/int32(m))
				}
			}
			req[s] = r
			if err := rt.Rendezvous().Send(rt.Context(), rt.Step(), ir.PServer(s), idsVar, ir.I32, i32Bytes(r)); err != nil {
				return err
			}
		}
		return nil
	}
	finish := func(rt Runtime) error {
		for s := range m {
			n, err := rt.Rendezvous().Recv(rt.Context(), rt.Step(), ir.PServer(s), rowsVar, f32Bytes(got[s]))
			if err != nil {
				return err
			}
			want := 0
			for t, out := range k.Out {
				want += 4 * len(slots[s][t]) * out.RowWidth()
			}
			if n != want {
				return fmt.Errorf("pserver-%d answered %d bytes for the rows of %d tables (%d bytes); the pservers run another plan than this trainer: use one split for the whole job", s, n, nt, want)
			}
			at := 0
			for t, out := range k.Out {
				d := out.RowWidth()
				for _, p := range slots[s][t] {
					copy(out.F[int(p)*d:(int(p)+1)*d], got[s][at:at+d])
					at += d
				}
			}
		}
		return nil
	}
	return Split{Start: start, Finish: finish}, nil
}

// sendTablesKernel sends each shard one message with its part of every
// table's row gradient.
func sendTablesKernel(k Args) (Kernel, error) {
	v, m := k.Attrs.String("var"), k.Attrs.Int("shards")
	nt := len(k.In)
	size := 4 * nt
	for _, g := range k.In {
		size += cap(g.Rows.IDs) * 4 * (1 + g.RowWidth())
	}
	bufs := make([][]byte, m)
	for s := range m {
		bufs[s] = make([]byte, size)
	}
	counts := make([]int, m*nt) // [s*nt+t]
	return func(rt Runtime) error {
		clear(counts)
		for t, g := range k.In {
			for _, id := range g.Rows.IDs {
				counts[(int(id)%m)*nt+t]++
			}
		}
		for s := range m {
			b := bufs[s]
			at := 4 * nt
			for t, g := range k.In {
				c, d := counts[s*nt+t], g.RowWidth()
				binary.LittleEndian.PutUint32(b[4*t:], uint32(c))
				ib := i32View(b[at : at+4*c])
				vb := tensor.F32View(b[at+4*c : at+4*c*(1+d)])
				n := 0
				for slot, id := range g.Rows.IDs {
					if int(id)%m != s {
						continue
					}
					ib[n] = id / int32(m)
					copy(vb[n*d:(n+1)*d], g.F[slot*d:(slot+1)*d])
					n++
				}
				at += 4 * c * (1 + d)
			}
			if err := rt.Rendezvous().Send(rt.Context(), rt.Step(), ir.PServer(s), v, ir.Rows, b[:at]); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// bundleParts checks a bundled message's header: nt counts (int32) of at
// most most[t] each, whose parts (per bytes each of every count) fill the
// message exactly. It returns the counts (into counts).
func bundleParts(b []byte, nt int, most []int, per func(t int) int, counts []int) error {
	if len(b) < 4*nt {
		return fmt.Errorf("%d bytes, shorter than the counts of its %d tables", len(b), nt)
	}
	size := 4 * nt
	for t := range nt {
		c := int(int32(binary.LittleEndian.Uint32(b[4*t:])))
		if c < 0 || c > most[t] {
			return fmt.Errorf("table %d's count %d is outside [0, %d]", t, c, most[t])
		}
		counts[t] = c
		size += c * per(t)
	}
	if size != len(b) {
		return fmt.Errorf("%d bytes, but its counts %v make %d", len(b), counts, size)
	}
	return nil
}

func serveTablesKernel(k Args) (Kernel, error) {
	v, count := k.Attrs.String("var"), k.Attrs.Int("count")
	most := k.Attrs.Ints("max_rows")
	nt := len(k.In)
	idsVar, rowsVar, gradVar := ops.TableIDs(v), ops.TableRows(v), ops.GradName(v)
	nids, nvals := nt, 0
	for t, tb := range k.In {
		nids += most[t]
		nvals += most[t] * tb.RowWidth()
	}
	ids := make([]int32, nids)
	counts := make([]int, nt)
	trainers := k.Node.TrainerCount()
	replies := make([][]float32, trainers) // kept until written, as serve_rows's
	for t := range replies {
		replies[t] = make([]float32, nvals)
	}
	four := func(int) int { return 4 }
	serve := func(rt Runtime, src int, step int64, n int) error {
		b := i32Bytes(ids)[:n]
		if n == 0 {
			// An empty request asks for no rows of any table: what a
			// trainer re-sends to a restarted pserver for a step whose
			// rows it already has (rejoin.PlanResend).
			clear(counts)
		} else if err := bundleParts(b, nt, most, four, counts); err != nil {
			return fmt.Errorf("trainer-%d sent a bundled request for rows of %d tables that does not add up: %v; nothing was served (the trainer runs another plan, or sends corrupt ids)", src, nt, err)
		}
		at := nt
		for t, tb := range k.In {
			for _, r := range ids[at : at+counts[t]] {
				if r < 0 || int(r) >= tb.Shape[0] {
					return fmt.Errorf("trainer-%d asked for local row %d of table %d of its bundled request, whose shard here holds %d rows; nothing was served (the trainer runs another plan, or sends corrupt ids)", src, r, t, tb.Shape[0])
				}
			}
			at += counts[t]
		}
		rows := replies[src]
		at, w := nt, 0
		for t, tb := range k.In {
			d := tb.RowWidth()
			gatherRows(rows[w:w+counts[t]*d], tb.F, ids[at:at+counts[t]], d)
			at += counts[t]
			w += counts[t] * d
		}
		return rt.Rendezvous().Send(rt.Context(), step, ir.Trainer(src), rowsVar, ir.F32, f32Bytes(rows[:w]))
	}
	return serveRequests(k, count, idsVar, gradVar, i32Bytes(ids), serve), nil
}

func accumulateTablesKernel(k Args) (Kernel, error) {
	v, count := k.Attrs.String("var"), k.Attrs.Int("count")
	most := k.Attrs.Ints("max_rows")
	nt := len(k.Out)
	size := 4 * nt
	for t, out := range k.Out {
		size += most[t] * 4 * (1 + out.RowWidth())
	}
	bufs := make([][]byte, count)
	sizes := make([]int, count)
	srcs := make([]int, count)
	counts := make([][]int, count)
	for p := range bufs {
		bufs[p] = make([]byte, size)
		counts[p] = make([]int, nt)
	}
	per := func(t int) int { return 4 * (1 + k.Out[t].RowWidth()) }
	return func(rt Runtime) error {
		// Every piece is checked before any is merged: a bad one applies nothing.
		for p := range count {
			var err error
			if sizes[p], srcs[p], err = recvPiece(rt, k, count, p, v, bufs[p]); err != nil {
				return err
			}
			b := bufs[p][:sizes[p]]
			if err := bundleParts(b, nt, most, per, counts[p]); err != nil {
				return fmt.Errorf("trainer-%d sent a bundled row gradient of %d tables that does not add up: %v; nothing was applied", srcs[p], nt, err)
			}
			at := 4 * nt
			for t, out := range k.Out {
				c := counts[p][t]
				for _, r := range i32View(b[at : at+4*c]) {
					if r < 0 || int(r) >= out.Shape[0] {
						return fmt.Errorf("trainer-%d sent a gradient for local row %d of table %d of its bundle, whose shard here holds %d rows; nothing was applied", srcs[p], r, t, out.Shape[0])
					}
				}
				at += c * per(t)
			}
		}
		for _, out := range k.Out {
			out.Rows.Reset()
			out.F = out.F[:0]
		}
		for p := range count {
			b := bufs[p]
			at := 4 * nt
			for t, out := range k.Out {
				c, d := counts[p][t], out.RowWidth()
				addRows(out, i32View(b[at:at+4*c]), tensor.F32View(b[at+4*c:at+4*c*(1+d)]))
				at += 4 * c * (1 + d)
			}
		}
		if count > 1 {
			inv := 1 / float32(count)
			for _, out := range k.Out {
				for i := range out.F {
					out.F[i] *= inv
				}
			}
		}
		return nil
	}, nil
}
