package comm

// Pulls: trainer 0 reads rows of the pservers' table shards outside the
// steps, for the held-out evaluation of a job with lookup tables and to
// write the whole model at the end (docs/wire.md, "Pulls"). A pull is a
// request (PullVar: which rows) and its reply (PulledVar: their values),
// keyed by a sequence number above every step, so a pserver's DropBefore
// never drops one; a trainer waits for each reply before it sends the
// next request, so a pserver answers them one at a time.

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/transport"
)

// PullVar and PulledVar are the reserved transfer names of a pull of
// table's rows: the request (trainer -> pserver) and the rows (pserver ->
// trainer).
func PullVar(table string) string   { return "psgraph/pull/" + table }
func PulledVar(table string) string { return "psgraph/rows/" + table }

// PullRows is how many rows of width values one pull moves at most: 1 MiB
// of values, so that neither side holds more than that per pull.
func PullRows(width int) int { return max(1, (1<<20)/(4*max(width, 1))) }

// pullHeader is the bytes of a request before its ids: at (int64), flags,
// first, n (int32 each), little-endian.
const pullHeader = 20

// pullBase keys pulls: above every step a job runs, below CtrlStep.
const pullBase int64 = 1 << 62

const (
	pullFinal = 1 << iota
	pullRange
	pullKeys    // a dynamic shard's keys (int64) instead of its rows
	pullCount   // a dynamic shard's live rows (uint64) instead of its rows
	pullKeyList // the rows of a dynamic shard's keys listed (int64)
)

// Pull is a request for rows of one pserver's shard of a table.
type Pull struct {
	// At is how many steps the trainer ran: a sync shard answers once it
	// applied the updates of every step below At.
	At int64
	// Final marks the job's end: an async shard then answers once every
	// other trainer finished and it applied every update it received
	// (this trainer's up to step At-1).
	Final bool
	// IDs are the local rows asked for; nil: the rows [First, First+N).
	IDs      []int32
	First, N int
	// Of a dynamic table's shard (docs/wire.md, "Pulls"): ReplyKeys asks
	// for the keys of entries [First, First+N) of the shard's rows in
	// ascending key order (int64, two float32 words each) instead of
	// their rows; Count for the number of those rows (uint64, two words);
	// KeyList, when not nil, for the rows of those keys (the default row
	// for a key without one), not a range.
	ReplyKeys, Count bool
	KeyList          []int64
}

// DynamicPullKeyList is how many listed keys of a dynamic table of row
// width width one pull asks for at most (the request's size as PullSpec
// allows it).
func DynamicPullKeyList(width int) int { return PullRows(width) / 2 }

// DynamicPullKeys is how many keys of a dynamic table of row width width
// one pull moves at most (as many bytes as PullRows rows).
func DynamicPullKeys(width int) int { return PullRows(width) * max(width, 1) / 2 }

// Rows is how many rows the request asks for.
func (r Pull) Rows() int {
	if r.KeyList != nil {
		return len(r.KeyList)
	}
	if r.IDs != nil {
		return len(r.IDs)
	}
	return r.N
}

func (r Pull) encode() []byte {
	b := make([]byte, pullHeader+4*len(r.IDs))
	binary.LittleEndian.PutUint64(b, uint64(r.At))
	var flags uint32
	if r.Final {
		flags |= pullFinal
	}
	if r.ReplyKeys {
		flags |= pullKeys
	}
	if r.Count {
		flags |= pullCount
	}
	if r.KeyList != nil {
		return r.encodeKeys(flags)
	}
	n := len(r.IDs)
	if r.IDs == nil {
		flags |= pullRange
		n = r.N
	}
	binary.LittleEndian.PutUint32(b[8:], flags)
	binary.LittleEndian.PutUint32(b[12:], uint32(r.First))
	binary.LittleEndian.PutUint32(b[16:], uint32(n))
	for i, id := range r.IDs {
		binary.LittleEndian.PutUint32(b[pullHeader+4*i:], uint32(id))
	}
	return b
}

// encodeKeys is the request of a list of a dynamic table's keys: the
// header (first 0, n the keys), then the keys (int64).
func (r Pull) encodeKeys(flags uint32) []byte {
	b := make([]byte, pullHeader+8*len(r.KeyList))
	binary.LittleEndian.PutUint64(b, uint64(r.At))
	binary.LittleEndian.PutUint32(b[8:], flags|pullKeyList)
	binary.LittleEndian.PutUint32(b[16:], uint32(len(r.KeyList)))
	for i, k := range r.KeyList {
		binary.LittleEndian.PutUint64(b[pullHeader+8*i:], uint64(k))
	}
	return b
}

// DecodeDynamicPull reads a request of a dynamic table's shard: a range
// of its rows or keys in ascending key order, or its row count (the
// range is checked against the shard's rows once they are known), or the
// rows of a list of keys, read into keys (reused).
func DecodeDynamicPull(b []byte, keys []int64) (Pull, error) {
	if len(b) < pullHeader {
		return Pull{}, fmt.Errorf("a pull of a dynamic table's shard of %d bytes, shorter than its header (%d)", len(b), pullHeader)
	}
	flags := binary.LittleEndian.Uint32(b[8:])
	r := Pull{At: int64(binary.LittleEndian.Uint64(b)), Final: flags&pullFinal != 0, ReplyKeys: flags&pullKeys != 0, Count: flags&pullCount != 0,
		First: int(int32(binary.LittleEndian.Uint32(b[12:]))), N: int(int32(binary.LittleEndian.Uint32(b[16:])))}
	if flags&pullKeyList != 0 {
		if r.N < 0 || len(b) != pullHeader+8*r.N || r.ReplyKeys || r.Count {
			return Pull{}, fmt.Errorf("a pull of %d keys of a dynamic table's shard carries %d bytes of keys (flags %#x)", r.N, len(b)-pullHeader, flags)
		}
		r.KeyList = keys[:0]
		if r.KeyList == nil { // a list, even empty, not a range
			r.KeyList = []int64{}
		}
		for i := range r.N {
			r.KeyList = append(r.KeyList, int64(binary.LittleEndian.Uint64(b[pullHeader+8*i:])))
		}
		return r, nil
	}
	if len(b) != pullHeader || flags&pullRange == 0 || r.First < 0 || r.N < 0 {
		return Pull{}, fmt.Errorf("a pull of a dynamic table's shard must be a range or a list of keys, got %d bytes, flags %#x, first %d, n %d", len(b), flags, r.First, r.N)
	}
	return r, nil
}

// DecodePull reads a request of rows of a shard of height rows, checking
// every row is one of the shard's; ids is reused for the request's ids.
func DecodePull(b []byte, height int, ids []int32) (Pull, error) {
	if len(b) < pullHeader || (len(b)-pullHeader)%4 != 0 {
		return Pull{}, fmt.Errorf("a pull of %d bytes is not a header and whole int32 ids", len(b))
	}
	flags := binary.LittleEndian.Uint32(b[8:])
	r := Pull{At: int64(binary.LittleEndian.Uint64(b)), Final: flags&pullFinal != 0,
		First: int(int32(binary.LittleEndian.Uint32(b[12:]))), N: int(int32(binary.LittleEndian.Uint32(b[16:])))}
	if flags&pullRange != 0 {
		if r.First < 0 || r.N < 0 || r.First+r.N > height || len(b) != pullHeader {
			return Pull{}, fmt.Errorf("a pull of rows [%d, %d) of a shard of %d rows", r.First, r.First+r.N, height)
		}
		return r, nil
	}
	if r.N != (len(b)-pullHeader)/4 {
		return Pull{}, fmt.Errorf("a pull of %d ids carries %d", r.N, (len(b)-pullHeader)/4)
	}
	r.IDs = ids[:0]
	if r.IDs == nil { // a list, even empty, not a range
		r.IDs = []int32{}
	}
	for i := range r.N {
		id := int32(binary.LittleEndian.Uint32(b[pullHeader+4*i:]))
		if id < 0 || int(id) >= height {
			return Pull{}, fmt.Errorf("a pull of local row %d of a shard of %d rows", id, height)
		}
		r.IDs = append(r.IDs, id)
	}
	return r, nil
}

// PullSpec is what a pserver accepts for pulls of its shard of table
// (rows of width values); PulledSpec what a trainer accepts for their
// replies.
func PullSpec(table string, width int) transport.Spec {
	return transport.Spec{Var: PullVar(table), DType: transport.I32, Bytes: pullHeader + 4*PullRows(width), AtMost: true}
}
func PulledSpec(table string, width int) transport.Spec {
	return transport.Spec{Var: PulledVar(table), DType: transport.F32, Bytes: 4 * width * PullRows(width), AtMost: true}
}

// pullSeq numbers a trainer's pulls.
type pullSeq struct{ n atomic.Int64 }

// Pull receives the rows r asks of pserver shard's part of table into
// dst (r.Rows() x width values, at most PullRows(width) rows). A pserver
// lost meanwhile is waited for like a parameter; one that came back as a
// new process is brought up to date (the restart protocol) and asked
// again.
func (c *Trainer) Pull(ctx context.Context, shard int, table string, r Pull, dst []float32) error {
	p := transport.PServer(shard)
	key := pullBase + c.pulls.n.Add(1)
	req := r.encode()
	sink := &transport.Prefix{Buf: tensor.F32Bytes(dst)}
	l := c.links[p]
	var told int64
	send := func() error {
		if l != nil {
			told = l.told.Load()
		}
		sink.N = 0
		return c.ep.Send(ctx, p, key, PullVar(table), transport.I32, req)
	}
	if err := send(); err != nil {
		return err
	}
	for {
		if l == nil || c.timeout <= 0 {
			if err := c.ep.RecvSink(ctx, p, key, PulledVar(table), sink); err != nil {
				return err
			}
			break
		}
		w, rc := c.watch.watched(ctx)
		if err := c.rejoinRestarted(ctx); err != nil {
			return err
		}
		if l.told.Load() != told { // a new process: it never saw the request
			if err := send(); err != nil {
				return err
			}
		}
		err := c.ep.RecvSink(w, p, key, PulledVar(table), sink)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case rc.Err() != nil:
			continue
		case lostPeer(err):
			if err := c.recover(ctx, l, err); err != nil {
				return err
			}
			continue
		default:
			return err
		}
		break
	}
	if want := 4 * len(dst); sink.N != want {
		return fmt.Errorf("%s answered %d bytes for %d values of %s; the pservers run another plan than this trainer", p, sink.N, len(dst), table)
	}
	return nil
}

// RecvPull receives the next pull of table from any trainer into buf
// (PullSpec's size), riding out a lost trainer as a gradient does. It
// fails with a finished error once every trainer is done.
func (c *PServer) RecvPull(ctx context.Context, table string, buf []byte) (transport.Key, []byte, error) {
	sink := &transport.Prefix{Buf: buf}
	k, err := c.recvAny(ctx, PullVar(table), nil, sink)
	return k, buf[:sink.N], err
}

// ReplyPull sends the rows a pull asked for to the trainer that asked.
// rows must stay unchanged until the trainer received them, which it
// did before it sends its next pull.
func (c *PServer) ReplyPull(ctx context.Context, k transport.Key, table string, rows []float32) error {
	return c.ep.Send(ctx, k.Src, k.Step, PulledVar(table), transport.F32, tensor.F32Bytes(rows))
}

// AwaitOthers waits until every trainer but who said Done and everything
// it sent arrived (an async shard's pull at the job's end reads the shard
// only then); a lost trainer gets the timeout to come back.
func (c *PServer) AwaitOthers(ctx context.Context, who int) error {
	for i := range c.trainers {
		if i == who {
			continue
		}
		p := transport.Trainer(i)
		for {
			err := c.ep.WaitDone(ctx, p)
			if err == nil {
				break
			}
			if !lostPeer(err) || c.timeout <= 0 || ctx.Err() != nil {
				return err
			}
			if err := c.awaitTrainer(ctx, p, -1, err); err != nil {
				return err
			}
		}
	}
	return nil
}

// PullSpecs are the pull transfers a node with the transfer table ts
// accepts: a pserver the pulls of each table shard it serves, a trainer
// the rows of each table it fetches.
func PullSpecs(ts []dsl.Transfer) []transport.Spec {
	var out []transport.Spec
	seen := map[string]bool{}
	for _, t := range ts {
		if t.Kind != dsl.TableRowsTransfer {
			continue
		}
		tables := t.Tables // a bundle's: each of its tables is pulled by its name
		if tables == nil {
			tables = []dsl.BundledTable{{Name: t.Op.Attrs.String("var"), Width: t.Shape[1]}}
		}
		for _, tb := range tables {
			if seen[tb.Name] {
				continue
			}
			seen[tb.Name] = true
			if t.Recv {
				out = append(out, PulledSpec(tb.Name, tb.Width))
			} else {
				out = append(out, PullSpec(tb.Name, tb.Width))
			}
		}
	}
	return out
}
