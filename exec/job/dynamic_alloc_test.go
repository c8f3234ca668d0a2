package job

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/data/criteo"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/internal/testfix"
	"github.com/psgraph/psgraph/partition"
)

// loopRendezvous joins a 1x1 job's trainer and pserver programs run one
// after the other in one goroutine: what one sends, the other receives
// (by transfer name); a trainer's receive of rows or a parameter before
// the pserver ran gets zeros of the size asked for (the request's keys'
// rows).
type loopRendezvous struct {
	mu    sync.Mutex // a program's kernels send and receive from several goroutines
	msgs  map[string][]byte
	width int // the table's row width
	entry int // the bytes of one requested row: 12 (a key and its count), 4 (a fixed table's id)
}

// A 1x1 sync job's pserver receives from its one trainer by name: the
// calls of an async pserver or of a piece count below the trainers' fail.
var errLoopSync = errors.New("loopRendezvous joins a 1x1 sync job only")

func (r *loopRendezvous) Reply(context.Context, int64, string, string, ir.DType, []byte) error {
	return errLoopSync
}
func (r *loopRendezvous) RecvAny(context.Context, string, []byte) (int, ir.Node, int64, error) {
	return 0, ir.Node{}, 0, errLoopSync
}
func (r *loopRendezvous) Pending(context.Context, []string) (string, error) { return "", errLoopSync }

func (r *loopRendezvous) Send(_ context.Context, _ int64, _ ir.Node, v string, _ ir.DType, payload []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs[v] = append(r.msgs[v][:0], payload...)
	return nil
}

func (r *loopRendezvous) Recv(_ context.Context, _ int64, _ ir.Node, v string, dst []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if table, ok := strings.CutSuffix(v, "@rows"); ok {
		n := len(r.msgs[ops.TableIDs(table)]) / r.entry * 4 * r.width
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
	tp, err := program.Compile(j.Trainer, program.CompileOptions{Batch: 8, Node: kernels.Node{Role: ir.TrainerRole}})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	var pp *program.Program
	for _, part := range program.Components(j.PServers[0]) {
		p, err := program.Compile(part, program.CompileOptions{Sequential: true, Node: kernels.Node{Role: ir.PServerRole, Trainers: 1}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if len(p.Tables) > 0 {
			pp = p
		}
	}
	if err := program.Init(tp, program.InitOptions{From: ""}); err != nil {
		t.Fatal(err)
	}
	rv := &loopRendezvous{msgs: map[string][]byte{}, width: 4, entry: 12}
	feed := newTestFeed(t, j.Trainer, tp)
	rt := &program.Runtime{Ctx: context.Background(), PS: rv}
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

// BenchmarkSplitStepDynamicVsFixed runs one step of a 1x1 job's trainer
// and pserver programs, joined in one goroutine by loopRendezvous (no
// transport), of examples/ctr-dynamic.yaml (min_count 2, no ttl) and of
// examples/ctr.yaml (1M-bucket table), on 100,000 generated rows of a
// 2,000,000-id vocabulary: the kernels' cost per step of a split job,
// the trainer's fetch and send and the pserver's serve, accumulate and
// update, without the network or a second process.
func BenchmarkSplitStepDynamicVsFixed(b *testing.B) {
	dir := b.TempDir()
	f, err := os.Create(filepath.Join(dir, "ctr.tsv"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := criteo.Generate(f, criteo.Options{Rows: 100000, Seed: 1, Vocab: 2000000}); err != nil {
		b.Fatal(err)
	}
	f.Close()
	fixed, err := os.ReadFile("../../examples/ctr.yaml")
	if err != nil {
		b.Fatal(err)
	}
	dynamic, err := os.ReadFile("../../examples/ctr-dynamic.yaml")
	if err != nil {
		b.Fatal(err)
	}
	models := map[string]string{
		"fixed-1M": strings.NewReplacer("csv: data/ctr.tsv", "csv: ctr.tsv", "stream: true", "stream: false").Replace(string(fixed)),
		"dynamic":  strings.NewReplacer("ttl_steps: 2000", "ttl_steps: 0", "csv: data/ctr-drift.tsv", "csv: ctr.tsv", "stream: true", "stream: false").Replace(string(dynamic)),
	}
	for _, name := range []string{"fixed-1M", "dynamic"} {
		b.Run(name, func(b *testing.B) {
			g := sparseModelAt(b, filepath.Join(dir, name+".yaml"), []byte(models[name]))
			plan, err := partition.Split(g, partition.Options{Trainers: 1, PServers: 1})
			if err != nil {
				b.Fatal(err)
			}
			tp, err := program.Compile(plan.Trainer, program.CompileOptions{Node: kernels.Node{Role: ir.TrainerRole}})
			if err != nil {
				b.Fatal(err)
			}
			defer tp.Close()
			var parts []*program.Program
			for _, part := range program.Components(plan.PServers[0]) {
				p, err := program.Compile(part, program.CompileOptions{Sequential: true, Node: kernels.Node{Role: ir.PServerRole, Trainers: 1}})
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				if err := program.Init(p, program.InitOptions{From: ""}); err != nil {
					b.Fatal(err)
				}
				parts = append(parts, p)
			}
			loaded, err := data.LoadSplit(plan.Trainer.Data, nil)
			if err != nil {
				b.Fatal(err)
			}
			set := loaded.Train
			st, feed := data.NewStream(set), program.NewFeeder(plan.Trainer, tp.Scope)
			entry := 4
			if name == "dynamic" {
				entry = 12
			}
			rv := &loopRendezvous{msgs: map[string][]byte{}, width: 16, entry: entry}
			rt := &program.Runtime{Ctx: context.Background(), PS: rv}
			batch := int64(plan.Trainer.Batch())
			step := func(k int) {
				if err := feed.Fill(st, int64(k)*batch); err != nil {
					b.Fatal(err)
				}
				rt.StepNum = int64(k)
				if err := tp.Run(rt); err != nil {
					b.Fatal(err)
				}
				for _, p := range parts {
					if err := p.Run(rt); err != nil {
						b.Fatal(err)
					}
				}
			}
			for k := range 20 {
				step(k)
			}
			cpu0 := testfix.ProcessCPU()
			b.ReportAllocs()
			b.ResetTimer()
			for k := range b.N {
				step(20 + k)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
			b.ReportMetric(float64((testfix.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/step")
		})
	}
}
