package kernels

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/tensor"
)

// onOf is the role that runs op (the catalog's).
func onOf(op string) ir.Role {
	def, _ := ops.Lookup(op)
	return def.On
}

// hostileRuntime answers every receive with a fixed payload.
type hostileRuntime struct {
	payload []byte
	sent    int
}

func (r *hostileRuntime) Context() context.Context { return context.Background() }
func (r *hostileRuntime) Step() int64              { return 0 }
func (r *hostileRuntime) Rendezvous() Rendezvous   { return r }
func (r *hostileRuntime) Server() ServerRendezvous { return nil }
func (r *hostileRuntime) Queue(string, int) Queue  { return nil }
func (r *hostileRuntime) TableReads() sync.Locker  { return nil }
func (r *hostileRuntime) Serial() bool             { return false }
func (r *hostileRuntime) Send(context.Context, int64, ir.Node, string, ir.DType, []byte) error {
	r.sent++
	return nil
}
func (r *hostileRuntime) Recv(_ context.Context, _ int64, _ ir.Node, _ string, dst []byte) (int, error) {
	return copy(dst, r.payload), nil
}

// A pserver's shard ops refuse hostile messages from a trainer: ids
// outside the shard, a row gradient that is not whole rows or names rows
// outside the shard. The error names the trainer, nothing is served or
// merged, and the shard is unchanged.
func TestShardOpsRefuseHostileInput(t *testing.T) {
	const rows, d = 5, 2
	ids := func(v ...int32) []byte { return i32Bytes(v) }
	grad := func(id int32, vals ...float32) []byte {
		return append(i32Bytes([]int32{id}), f32Bytes(vals)...)
	}
	for _, c := range []struct {
		op      string
		payload []byte
		want    string
	}{
		{"serve_rows", ids(1, 7), "trainer-0 asked for local row 7"},
		{"serve_rows", ids(-1), "trainer-0 asked for local row -1"},
		{"accumulate_rows", grad(2, 1, 1)[:10], "not whole rows"},
		{"accumulate_rows", grad(9, 1, 1), "trainer-0 sent a gradient for local row 9"},
	} {
		table := tensor.New(tensor.F32, tensor.Shape{rows, d})
		for i := range table.F {
			table.F[i] = float32(i)
		}
		before := append([]float32{}, table.F...)
		args := Args{Attrs: ops.Attrs{"var": "T", "count": 1, "max_rows": 4, "shape": []int{rows, d}}, Node: Node{Role: onOf(c.op)}}
		var out *tensor.Tensor
		if c.op == "serve_rows" {
			args.In = []*tensor.Tensor{table}
		} else {
			out = tensor.NewSparse(tensor.Shape{rows, d}, 4, tensor.NewRowSet(4))
			args.Out = []*tensor.Tensor{out}
		}
		k, err := Build(c.op, args)
		if err != nil {
			t.Fatal(err)
		}
		rt := &hostileRuntime{payload: c.payload}
		err = k(rt)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "nothing") {
			t.Errorf("%s with %v: error %v, want one saying %q and that nothing was applied", c.op, c.payload, err, c.want)
		}
		if rt.sent != 0 {
			t.Errorf("%s answered a hostile request", c.op)
		}
		if out != nil && len(out.Rows.IDs) != 0 {
			t.Errorf("%s merged rows %v of a hostile gradient", c.op, out.Rows.IDs)
		}
		for i := range before {
			if table.F[i] != before[i] {
				t.Fatalf("%s changed the shard", c.op)
			}
		}
	}
}

// shardRuntime plays M pservers of a table sharded by row id mod M: it
// records the local ids each shard is asked for and answers them with
// the rows of the whole table.
type shardRuntime struct {
	hostileRuntime
	table [][]float32
	m     int
	asked [][]int32
}

func (r *shardRuntime) Rendezvous() Rendezvous { return r }

func (r *shardRuntime) Send(_ context.Context, _ int64, p ir.Node, _ string, _ ir.DType, payload []byte) error {
	r.asked[p.Index] = append([]int32{}, i32View(payload)...)
	return nil
}

func (r *shardRuntime) Recv(_ context.Context, _ int64, p ir.Node, _ string, dst []byte) (int, error) {
	var rows []float32
	for _, local := range r.asked[p.Index] {
		rows = append(rows, r.table[int(local)*r.m+p.Index]...)
	}
	return copy(dst, f32Bytes(rows)), nil
}

// fetch_rows skips padding: the ids < 0 of an embedding_bag's bags are
// sent to no shard, every real id is fetched once, and the rows it
// assembles are the table's. A lookup_table on the fetched rows refuses
// a negative id, naming it.
func TestFetchRowsSkipsPadding(t *testing.T) {
	const v, d, m = 10, 2, 3
	table := make([][]float32, v)
	for r := range table {
		table[r] = []float32{float32(r), float32(-r)}
	}
	bags := &tensor.Tensor{DType: tensor.I32, Shape: tensor.Shape{2, 3}, I: []int32{7, -1, 4, -1, -1, 7}}
	items := &tensor.Tensor{DType: tensor.I32, Shape: tensor.Shape{2}, I: []int32{2, 4}}
	out := tensor.NewSparse(tensor.Shape{v, d}, 8, tensor.NewRowSet(8))
	k, err := Build("fetch_rows", Args{In: []*tensor.Tensor{bags, items}, Out: []*tensor.Tensor{out}, Attrs: ops.Attrs{"var": "T", "shards": m, "shape": []int{v, d}}, Node: Node{Role: ir.TrainerRole}})
	if err != nil {
		t.Fatal(err)
	}
	rt := &shardRuntime{table: table, m: m, asked: make([][]int32, m)}
	if err := k(rt); err != nil {
		t.Fatal(err)
	}
	if want := []int32{7, 4, 2}; !slices.Equal(out.Rows.IDs, want) {
		t.Errorf("fetched rows %v, want %v (each real id once, in order of first appearance)", out.Rows.IDs, want)
	}
	for s, ids := range rt.asked {
		for _, local := range ids {
			if local < 0 {
				t.Errorf("shard %d was asked for local row %d", s, local)
			}
		}
	}
	for i, r := range out.Rows.IDs {
		if got := out.F[i*d : (i+1)*d]; !slices.Equal(got, table[r]) {
			t.Errorf("row %d fetched as %v, want %v", r, got, table[r])
		}
	}
	y := tensor.New(tensor.F32, tensor.Shape{2, d})
	pad := &tensor.Tensor{DType: tensor.I32, Shape: tensor.Shape{2}, I: []int32{7, -1}}
	look, err := Build("lookup_table", Args{In: []*tensor.Tensor{out, pad}, Out: []*tensor.Tensor{y}})
	if err != nil {
		t.Fatal(err)
	}
	if err := look(rt); err == nil || !strings.Contains(err.Error(), "id -1 at flat position 1") {
		t.Errorf("lookup_table of id -1 in fetched rows: error %v, want one naming the id", err)
	}
}
