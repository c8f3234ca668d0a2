package kernels

import (
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/tensor"
)

// A pserver's bundled shard ops refuse a bundled message that does not
// add up (too short for its counts, counts and length that disagree, a
// count beyond the table's max_rows or below 0) or names a row outside a
// table's shard, the second table's as well as the first's. The error
// names the trainer; nothing is answered or merged, even of the tables
// whose part was sound, and no shard changes.
func TestBundledTableMessagesRefused(t *testing.T) {
	shapes := [][2]int{{5, 2}, {4, 3}} // two tables' shards: rows, width
	ids := func(v ...int32) []byte { return i32Bytes(v) }
	// grad is a bundled row gradient: the counts, then per table its ids
	// and rows of ones.
	grad := func(parts ...[]int32) []byte {
		var b []int32
		for _, p := range parts {
			b = append(b, int32(len(p)))
		}
		out := i32Bytes(b)
		for t, p := range parts {
			out = append(out, i32Bytes(p)...)
			vals := make([]float32, len(p)*shapes[t][1])
			for i := range vals {
				vals[i] = 1
			}
			out = append(out, f32Bytes(vals)...)
		}
		return out
	}
	for _, c := range []struct {
		op      string
		payload []byte
		want    string
	}{
		{"serve_tables", ids(1), "shorter than the counts of its 2 tables"},
		{"serve_tables", ids(2, 1, 0, 1), "its counts [2 1] make 20"},
		{"serve_tables", ids(5, 0, 0, 1, 2, 3, 4), "table 0's count 5 is outside [0, 4]"},
		{"serve_tables", ids(-1, 1, 0), "table 0's count -1"},
		{"serve_tables", ids(1, 1, 4, 4), "trainer-0 asked for local row 4 of table 1"},
		{"serve_tables", ids(1, 1, 9, 0), "trainer-0 asked for local row 9 of table 0"},
		{"accumulate_tables", grad([]int32{1}, []int32{2})[:20], "does not add up"},
		{"accumulate_tables", grad([]int32{1, 2}, []int32{7}), "trainer-0 sent a gradient for local row 7 of table 1"},
		{"accumulate_tables", grad([]int32{-3}, nil), "local row -3 of table 0"},
	} {
		var tables []*tensor.Tensor
		var before [][]float32
		for _, s := range shapes {
			tb := tensor.New(tensor.F32, tensor.Shape{s[0], s[1]})
			for i := range tb.F {
				tb.F[i] = float32(i)
			}
			tables = append(tables, tb)
			before = append(before, append([]float32{}, tb.F...))
		}
		args := Args{Attrs: ops.Attrs{"var": ops.TableBundle, "count": 1, "max_rows": []int{4, 4}, "shapes": []int{5, 2, 4, 3}}, Node: Node{Role: onOf(c.op)}}
		var outs []*tensor.Tensor
		if c.op == "serve_tables" {
			args.In = tables
		} else {
			for _, s := range shapes {
				outs = append(outs, tensor.NewSparse(tensor.Shape{s[0], s[1]}, 4, tensor.NewRowSet(4)))
			}
			args.Out = outs
		}
		k, err := Build(c.op, args)
		if err != nil {
			t.Fatal(err)
		}
		rt := &hostileRuntime{payload: c.payload}
		err = k(rt)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "trainer-0") || !strings.Contains(err.Error(), "nothing") {
			t.Errorf("%s with %v: error %v, want one from trainer-0 saying %q and that nothing was applied", c.op, c.payload, err, c.want)
		}
		if rt.sent != 0 {
			t.Errorf("%s answered a hostile request", c.op)
		}
		for i, out := range outs {
			if len(out.Rows.IDs) != 0 {
				t.Errorf("%s merged rows %v of table %d of a hostile gradient", c.op, out.Rows.IDs, i)
			}
		}
		for i, tb := range tables {
			for j := range before[i] {
				if tb.F[j] != before[i][j] {
					t.Fatalf("%s changed shard %d", c.op, i)
				}
			}
		}
	}
}
