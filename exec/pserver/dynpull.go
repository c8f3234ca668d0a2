package pserver

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
)

// dynShardServer answers the pulls of a pserver's shard of a dynamic
// table (docs/wire.md, "Pulls"). Trainer 0's held-out evaluation asks
// for the rows of its chunk's keys (the default row for a key without
// one), read as the fixed shards' rows are, once the shard is as far as
// the pull asks (part.readAt; Table.Read changes nothing). Its --save at
// the job's end asks for the shard's row count, then its keys and its
// rows by range of the shard's rows in ascending key order: the first
// such pull lists the table's keys (a dyntable.Export cut, once the
// shard is final) and sorts them, 8 bytes a live row, held until the job
// ends; the rows are read from the table range by range.
type dynShardServer struct {
	table         string // the table (the transfers' name)
	t             *dyntable.Table
	part          *part
	shard, shards int

	keys   []int64 // the shard's live keys, ascending
	done   bool
	keyBuf []int64 // a pull's keys

}

func (s *dynShardServer) serve(ctx context.Context, c Comm) error {
	w := s.t.Config().Dim
	s.keyBuf = make([]int64, 0, comm.DynamicPullKeyList(w))
	return servePulls(ctx, c, s.part, s.table, "dynamic table "+s.table, w, s)
}

// read reads the rows of r's keys (the default row for a key without
// one), or, at the job's end, what r asks of the final shard.
func (s *dynShardServer) read(r comm.Pull, buf []float32) ([]float32, error) {
	if r.KeyList != nil {
		rows := buf[:len(r.KeyList)*s.t.Config().Dim]
		return rows, s.t.Read(r.KeyList, rows)
	}
	if err := s.export(); err != nil {
		return nil, err
	}
	return s.reply(r, s.t.Config().Dim, buf)
}

// decode reads a pull and checks what can be checked before the shard is
// read: a list of keys of this shard, or a range at the job's end.
func (s *dynShardServer) decode(b []byte) (comm.Pull, error) {
	r, err := comm.DecodeDynamicPull(b, s.keyBuf)
	switch {
	case err != nil:
		return r, err
	case r.KeyList == nil && !r.Final:
		return r, fmt.Errorf("a pull of a range at step %d, before the job's end (a dynamic shard's rows are pulled by range only to save the model)", r.At)
	}
	for _, key := range r.KeyList {
		if sh := dyntable.ShardOf(key, s.shards); sh != s.shard {
			return r, fmt.Errorf("a pull of key %d from shard %d of %d, but the key belongs to shard %d", key, s.shard, s.shards, sh)
		}
	}
	return r, nil
}

// reply fills buf with what r asks for and returns it.
func (s *dynShardServer) reply(r comm.Pull, w int, buf []float32) ([]float32, error) {
	n := len(s.keys)
	switch {
	case r.Count:
		out := buf[:2]
		binary.LittleEndian.PutUint64(tensor.F32Bytes(out), uint64(n))
		return out, nil
	case r.First+r.N > n:
		return nil, fmt.Errorf("a pull of entries [%d, %d) of a shard of %d rows", r.First, r.First+r.N, n)
	case r.ReplyKeys:
		if r.N > comm.DynamicPullKeys(w) {
			return nil, fmt.Errorf("a pull of %d keys, more than %d", r.N, comm.DynamicPullKeys(w))
		}
		out := buf[:2*r.N]
		b := tensor.F32Bytes(out)
		for i, key := range s.keys[r.First : r.First+r.N] {
			binary.LittleEndian.PutUint64(b[8*i:], uint64(key))
		}
		return out, nil
	case r.N > comm.PullRows(w):
		return nil, fmt.Errorf("a pull of %d rows, more than %d", r.N, comm.PullRows(w))
	}
	out := buf[:r.N*w]
	if err := s.t.Read(s.keys[r.First:r.First+r.N], out); err != nil {
		return nil, err
	}
	return out, nil
}

// export lists the final table's keys in ascending order, once.
func (s *dynShardServer) export() error {
	if s.done {
		return nil
	}
	s.part.cuts.Lock() // a checkpoint of the last step may still be writing
	defer s.part.cuts.Unlock()
	keys, err := program.TableKeys(s.t)
	if err != nil {
		return err
	}
	s.keys, s.done = keys, true
	return nil
}
