package kernels

import (
	"context"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/tensor"
)

// hostileRuntime answers every receive with a fixed payload.
type hostileRuntime struct {
	NoRendezvous
	payload []byte
	sent    int
}

func (r *hostileRuntime) Context() context.Context { return context.Background() }
func (r *hostileRuntime) Step() int64              { return 0 }
func (r *hostileRuntime) Rendezvous() Rendezvous   { return r }
func (r *hostileRuntime) Queue(string, int) Queue  { return nil }
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
		args := Args{Attrs: ops.Attrs{"var": "T", "count": 1, "max_rows": 4, "shape": []int{rows, d}}}
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
