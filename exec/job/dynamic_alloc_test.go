package job

import (
	"context"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/program"
)

// loopRendezvous joins a 1x1 job's trainer and pserver programs run one
// after the other in one goroutine: what one sends, the other receives
// (by transfer name); a trainer's receive of rows or a parameter before
// the pserver ran gets zeros of the size asked for (the request's keys'
// rows).
type loopRendezvous struct {
	kernels.NoRendezvous
	msgs  map[string][]byte
	width int // the table's row width
}

func (r *loopRendezvous) Send(_ context.Context, _ int64, _ ir.Node, v string, _ ir.DType, payload []byte) error {
	r.msgs[v] = append(r.msgs[v][:0], payload...)
	return nil
}

func (r *loopRendezvous) Recv(_ context.Context, _ int64, _ ir.Node, v string, dst []byte) (int, error) {
	if table, ok := strings.CutSuffix(v, "@rows"); ok {
		n := len(r.msgs[ops.TableIDs(table)]) / 12 * 4 * r.width
		clear(dst[:n])
		return n, nil
	}
	if b, ok := r.msgs[v]; ok {
		return copy(dst, b), nil
	}
	clear(dst)
	return len(dst), nil
}

// A steady-state step of a dynamic table in a split job allocates
// nothing, as a fixed table's does: the trainer's fetch (keys merged,
// requests per shard), dyn_pos and send_rows, and the pserver's dyn_serve,
// dyn_accumulate, dyn_gather, the optimizer and dyn_scatter, once the
// step's keys have rows.
func TestDynamicSplitStepDoesNotAllocate(t *testing.T) {
	j := dynamicTableJob(t, 1, 1, false)
	tp, err := program.Compile(j.Trainer, program.CompileOptions{Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	var pp *program.Program
	for _, part := range program.Components(j.PServers[0]) {
		p, err := program.Compile(part, program.CompileOptions{Sequential: true, Node: kernels.Node{Trainers: 1}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if len(p.Tables) > 0 {
			pp = p
		}
	}
	if err := program.InitPersistent(tp, ""); err != nil {
		t.Fatal(err)
	}
	rv := &loopRendezvous{msgs: map[string][]byte{}, width: 4}
	feed := newTestFeed(t, j.Trainer, tp)
	rt := &program.Runtime{Ctx: context.Background(), RV: rv}
	k := 0
	step := func() {
		feed(k % 50) // 50 batches of 8 rows: the file, each key seen again every pass
		rt.StepNum = int64(k)
		if err := tp.Run(rt); err != nil {
			t.Fatal(err)
		}
		if err := pp.Run(rt); err != nil {
			t.Fatal(err)
		}
		k++
	}
	for range 100 { // two passes: every key admitted, every buffer grown
		step()
	}
	if allocs := testing.AllocsPerRun(50, step); allocs != 0 {
		t.Errorf("%.1f allocations per step, want 0", allocs)
	}
	if live := pp.Tables["emb.s0"].Stats().Live; live == 0 {
		t.Error("the shard holds no rows: the step served nothing")
	}
}
