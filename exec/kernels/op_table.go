package kernels

import (
	"fmt"
	"unsafe"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/tensor"
)

// The kernels of a sharded lookup table's ops (dsl/ops/op_table.go says
// how the table is laid out over the pservers): fetch_rows and send_rows
// on a trainer, serve_rows and accumulate_rows on a pserver.

func init() {
	registerSplit("fetch_rows", fetchRowsKernel)
	register("send_rows", sendRowsKernel)
	register("serve_rows", serveRowsKernel)
	register("accumulate_rows", accumulateRowsKernel)
}

func i32Bytes(x []int32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

// i32View returns b's memory as int32s, without copying (little-endian hosts).
func i32View(b []byte) []int32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func f32Bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

// fetchRowsKernel's Start sends each shard the ids it owns, its Finish
// receives each shard's rows (Split: every table's requests leave before
// any reply is waited for).
func fetchRowsKernel(k Args) (Split, error) {
	if k.Out[0].Shape[0] == ir.DynamicRows {
		return dynFetchKernel(k)
	}
	out, v := k.Out[0], k.Attrs.String("var")
	m := k.Attrs.Int("shards")
	height, d := out.Shape[0], out.RowWidth()
	maxRows := cap(out.Rows.IDs)
	ids := make([][]int32, m)   // local ids sent to shard s
	slots := make([][]int32, m) // their slots in out
	got := make([][]float32, m) // the rows shard s answered
	for s := range m {
		ids[s] = make([]int32, 0, maxRows)
		slots[s] = make([]int32, 0, maxRows)
		got[s] = make([]float32, maxRows*d)
	}
	idsVar, rowsVar := ops.TableIDs(v), ops.TableRows(v)
	start := func(rt Runtime) error {
		rows := out.Rows
		rows.Reset()
		for _, in := range k.In {
			for i, id := range in.I {
				if id < 0 {
					continue // padding of an embedding_bag (lookup_table refuses it)
				}
				if int(id) >= height {
					return idRange(i, id, height, in.Shape)
				}
				rows.Add(id)
			}
		}
		for s := range m {
			ids[s], slots[s] = ids[s][:0], slots[s][:0]
		}
		for slot, id := range rows.IDs {
			s := int(id) % m
			ids[s] = append(ids[s], id/int32(m))
			slots[s] = append(slots[s], int32(slot))
		}
		for s := range m {
			if err := rt.Rendezvous().Send(rt.Context(), rt.Step(), ir.PServer(s), idsVar, ir.I32, i32Bytes(ids[s])); err != nil {
				return err
			}
		}
		out.Fit()
		return nil
	}
	what := "rows of " + v
	finish := func(rt Runtime) error {
		return recvShardRows(rt, rowsVar, got, slots, out.F, d, what)
	}
	return Split{Start: start, Finish: finish}, nil
}

// recvShardRows is the Finish of a sharded fetch: it receives shard s's
// reply of rowsVar into got[s] and copies its i-th row (width w) to row
// at[s][i] of out; what names the request in the error of a reply of
// another size.
func recvShardRows(rt Runtime, rowsVar string, got [][]float32, at [][]int32, out []float32, w int, what string) error {
	for s := range got {
		n, err := rt.Rendezvous().Recv(rt.Context(), rt.Step(), ir.PServer(s), rowsVar, f32Bytes(got[s]))
		if err != nil {
			return err
		}
		if want := 4 * w * len(at[s]); n != want {
			return fmt.Errorf("pserver-%d answered %d bytes for %d %s (%d bytes); the pservers run another plan than this trainer: use one split for the whole job", s, n, len(at[s]), what, want)
		}
		for i, p := range at[s] {
			copy(out[int(p)*w:(int(p)+1)*w], got[s][i*w:(i+1)*w])
		}
	}
	return nil
}

func sendRowsKernel(k Args) (Kernel, error) {
	if k.In[0].Shape[0] == ir.DynamicRows {
		return dynSendRowsKernel(k)
	}
	g, v := k.In[0], k.Attrs.String("var")
	m := k.Attrs.Int("shards")
	d := g.RowWidth()
	maxRows := cap(g.Rows.IDs)
	bufs := make([][]byte, m)
	for s := range m {
		bufs[s] = make([]byte, maxRows*4*(1+d))
	}
	counts := make([]int, m)
	return func(rt Runtime) error {
		clear(counts)
		for _, id := range g.Rows.IDs {
			counts[int(id)%m]++
		}
		// Each shard's payload: its local row ids, then their values.
		for s := range m {
			c := counts[s]
			ib := i32View(bufs[s][:4*c])
			vb := tensor.F32View(bufs[s][4*c : 4*c*(1+d)])
			n := 0
			for slot, id := range g.Rows.IDs {
				if int(id)%m != s {
					continue
				}
				ib[n] = id / int32(m)
				copy(vb[n*d:(n+1)*d], g.F[slot*d:(slot+1)*d])
				n++
			}
			if err := rt.Rendezvous().Send(rt.Context(), rt.Step(), ir.PServer(s), v, ir.Rows, bufs[s][:4*counts[s]*(1+d)]); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

func serveRowsKernel(k Args) (Kernel, error) {
	table, v := k.In[0], k.Attrs.String("var")
	count, maxRows := k.Attrs.Int("count"), k.Attrs.Int("max_rows")
	height, d := table.Shape[0], table.RowWidth()
	idsVar, rowsVar := ops.TableIDs(v), ops.TableRows(v)
	gradVar := ops.GradName(v)
	ids := make([]int32, maxRows)
	// One reply per trainer, kept until it was written: in sync mode until
	// the next step's flush; in async mode until that trainer's next
	// request, which it sends only once it received this reply.
	trainers := k.Node.TrainerCount()
	replies := make([][]float32, trainers)
	for t := range replies {
		replies[t] = make([]float32, maxRows*d)
	}
	serve := func(rt Runtime, src int, step int64, n int) error {
		if n%4 != 0 {
			return fmt.Errorf("trainer-%d sent a request for rows of %s of %d bytes, not whole int32 ids; nothing was served (the trainer runs another plan, or sends corrupt ids)", src, v, n)
		}
		req := ids[:n/4]
		for _, r := range req {
			if r < 0 || int(r) >= height {
				return fmt.Errorf("trainer-%d asked for local row %d of %s, whose shard here holds %d rows; nothing was served (the trainer runs another plan, or sends corrupt ids)", src, r, v, height)
			}
		}
		rows := replies[src][:len(req)*d]
		for i, r := range req {
			copy(rows[i*d:(i+1)*d], table.F[int(r)*d:(int(r)+1)*d])
		}
		return rt.Rendezvous().Send(rt.Context(), step, ir.Trainer(src), rowsVar, ir.F32, f32Bytes(rows))
	}
	return serveRequests(k, count, idsVar, gradVar, i32Bytes(ids), serve), nil
}

// serveRequests is the loop of a pserver's table op (serve_rows,
// serve_tables): serve answers the request of n bytes in buf from trainer
// src for step. Sync, with every trainer's request counted: each
// trainer's request of the step in trainer order. Async: requests as they
// come until a row gradient (gradVar) is pending, which the accumulate op
// takes next (a gradient already pending goes first, so every request
// reads the rows with every gradient that arrived before it applied). A
// shard must not wait for a gradient while a request is pending: the
// trainer computes its gradient only once every shard answered it, so two
// shards each waiting for the gradient of the trainer the other has not
// answered would wait forever.
func serveRequests(k Args, count int, idsVar, gradVar string, buf []byte, serve func(rt Runtime, src int, step int64, n int) error) Kernel {
	trainers := k.Node.TrainerCount()
	either := []string{gradVar, idsVar} // a pending gradient first: requests read the newest rows
	return func(rt Runtime) error {
		if !k.Node.Async && count == trainers {
			for t := range trainers {
				n, err := rt.Rendezvous().Recv(rt.Context(), rt.Step(), ir.Trainer(t), idsVar, buf)
				if err != nil {
					return err
				}
				if err := serve(rt, t, rt.Step(), n); err != nil {
					return err
				}
			}
			return nil
		}
		for {
			next, err := rt.Server().Pending(rt.Context(), either)
			if err != nil {
				return err
			}
			if next == gradVar {
				return nil
			}
			n, src, step, err := rt.Server().RecvAny(rt.Context(), idsVar, buf)
			if err != nil {
				return err
			}
			if err := serve(rt, src.Index, step, n); err != nil {
				return err
			}
		}
	}
}

// recvPiece receives piece i of the count row gradients of transfer v a
// step of an accumulating op takes, into buf: in sync mode with a piece
// from every trainer, trainer i's of the step; else the next one from any
// trainer. It returns the piece's bytes and its trainer.
func recvPiece(rt Runtime, k Args, count, i int, v string, buf []byte) (n, src int, err error) {
	if !k.Node.Async && count == k.Node.TrainerCount() {
		n, err = rt.Rendezvous().Recv(rt.Context(), rt.Step(), ir.Trainer(i), v, buf)
		return n, i, err
	}
	n, from, _, err := rt.Server().RecvAny(rt.Context(), v, buf)
	return n, from.Index, err
}

func accumulateRowsKernel(k Args) (Kernel, error) {
	out, v := k.Out[0], k.Attrs.String("var")
	count, maxRows := k.Attrs.Int("count"), k.Attrs.Int("max_rows")
	height, d := out.Shape[0], out.RowWidth()
	bufs := make([][]byte, count)
	sizes := make([]int, count)
	srcs := make([]int, count)
	for t := range bufs {
		bufs[t] = make([]byte, maxRows*4*(1+d))
	}
	return func(rt Runtime) error {
		// Every piece is checked before any is merged: a bad one applies nothing.
		for t := range count {
			var err error
			if sizes[t], srcs[t], err = recvPiece(rt, k, count, t, v, bufs[t]); err != nil {
				return err
			}
			if sizes[t]%(4*(1+d)) != 0 {
				return fmt.Errorf("trainer-%d sent a row gradient of %s of %d bytes, not whole rows of width %d (4 bytes of id + %d of values each); nothing was applied", srcs[t], v, sizes[t], d, 4*d)
			}
			n := sizes[t] / (4 * (1 + d))
			for i := range n {
				if r := i32View(bufs[t][4*i : 4*i+4])[0]; r < 0 || int(r) >= height {
					return fmt.Errorf("trainer-%d sent a gradient for local row %d of %s, whose shard here holds %d rows; nothing was applied", srcs[t], r, v, height)
				}
			}
		}
		out.Rows.Reset()
		out.F = out.F[:0]
		for t := range count {
			n := sizes[t] / (4 * (1 + d))
			ids := i32View(bufs[t][:4*n])
			vals := tensor.F32View(bufs[t][4*n : 4*n*(1+d)])
			addRows(out, ids, vals)
		}
		if count > 1 {
			inv := 1 / float32(count)
			for i := range out.F {
				out.F[i] *= inv
			}
		}
		return nil
	}, nil
}
