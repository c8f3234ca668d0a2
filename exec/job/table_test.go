package job

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/trainer"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/partition"
)

// runTableJob runs a sharded-table job in process and merges the saved
// shards with trainer 0's file into one model file, which it returns.
func runTableJob(t *testing.T, g *dsl.Graph, n, m int, async bool, opt trainer.RunOptions) string {
	t.Helper()
	dir := t.TempDir()
	shardDir = dir
	defer func() { shardDir = "" }()
	opt.Save = filepath.Join(dir, "trainer.safetensors")
	runInmemJob(t, g, n, m, async, opt, 0)
	plan, err := partition.Split(g, partition.Options{Trainers: n, PServers: m})
	if err != nil {
		t.Fatal(err)
	}
	var shards []string
	for i := range m {
		shards = append(shards, filepath.Join(dir, fmt.Sprintf("pserver-%d.safetensors", i)))
	}
	out := filepath.Join(dir, "model.safetensors")
	if err := mergeShards(out, opt.Save, plan.PServers, shards); err != nil {
		t.Fatal(err)
	}
	// Trainer 0's file is the whole model already, its tables pulled from
	// the pservers at the end: the pservers' own shard files merged into
	// it change no byte.
	sameBytes(t, out, opt.Save)
	return out
}

// A table sharded by row id over M pservers and fetched by id trains
// exactly what local training does: N trainers with batch b against one
// node with batch N*b, for sgd, adagrad and adam (the row-wise update runs
// on each shard's rows; sync pservers average the row gradients).
func TestShardedTableEqualsLocalInmem(t *testing.T) {
	for _, opt := range []string{"sgd", "adagrad", "adam"} {
		for _, c := range []struct{ n, m int }{{1, 1}, {2, 2}, {2, 3}} {
			t.Run(fmt.Sprintf("%s/%dx%d", opt, c.n, c.m), func(t *testing.T) {
				path := "../../testdata/sparse/emb-" + opt + ".yaml"
				g := load(t, path)
				init := "../../testdata/sparse/init.safetensors"
				local := filepath.Join(t.TempDir(), "local.safetensors")
				if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 30, Batch: 8 * c.n, InitFrom: init, Save: local, Log: zerolog.Nop()}); err != nil {
					t.Fatal(err)
				}
				dist := runTableJob(t, g, c.n, c.m, false, trainer.RunOptions{Steps: 30, Batch: 8, InitFrom: init, Log: zerolog.Nop()})
				compareParams(t, local, dist, 1e-4)
			})
		}
	}
}

// A trainer of a sharded-table job moves rows, not tables: per step it
// sends each shard the unique ids it owns (4 bytes each) and their row
// gradients (4 + 4*D bytes each), and receives those rows (4*D bytes
// each), besides the dense parameters. Every node's summary counts
// exactly that, computed here from the data the trainers read.
func TestTableTrafficIsRowsInmem(t *testing.T) {
	const n, m, batch, steps, d = 2, 2, 8, 20, 4
	g := load(t, "../../testdata/sparse/emb-adagrad.yaml")
	loaded, err := data.LoadSplit(g.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := loaded.Train
	dense := int64(4 * g.Types["W"].Shape.Numel())
	served = nil
	sums := runInmemJob(t, g, n, m, false, trainer.RunOptions{Steps: steps, Batch: batch, Log: zerolog.Nop()}, 0)
	var pserverRecv int64
	for _, s := range served {
		pserverRecv += s.RecvBytes
	}
	var trainersSent int64
	for ti, s := range sums {
		var ids, worst int64
		for k := 0; k < steps; k++ {
			seen := map[int32]bool{}
			for r := 0; r < batch; r++ {
				row := (k*n*batch + ti*batch + r) % set.Rows
				for _, id := range set.IDs[row*set.NI : (row+1)*set.NI] {
					seen[id] = true
				}
			}
			ids += int64(len(seen))
			worst = max(worst, int64(len(seen)))
		}
		pos, res := int64(comm.PositionSpec.Bytes), int64(comm.ResumeSpec.Bytes)
		wantSent := 4*ids + 4*ids*(1+d) + steps*dense + m*pos
		wantRecv := 4*ids*d + (steps+1)*dense + m*res
		if s.SentBytes != wantSent || s.RecvBytes != wantRecv {
			t.Errorf("trainer-%d: sent %d, received %d; %d unique ids over %d steps mean %d and %d", ti, s.SentBytes, s.RecvBytes, ids, steps, wantSent, wantRecv)
		}
		// issue 13's bound, per step: 2 x (unique ids x (4*D + 8)) + 64 KiB
		if per := (s.SentBytes + s.RecvBytes) / steps; per > 2*worst*(4*d+8)+64<<10 {
			t.Errorf("trainer-%d moves %d bytes per step, above the bound for %d unique ids", ti, per, worst)
		}
		trainersSent += s.SentBytes
	}
	if pserverRecv != trainersSent {
		t.Errorf("the pservers received %d bytes, the trainers sent %d", pserverRecv, trainersSent)
	}
}

// Two tables (one read by two lookups) and a dense layer, from their
// initializers: the shards of a pserver start with the rows the whole
// table gets locally, so the job equals local training from the start.
func TestTwoTablesEqualLocalInmem(t *testing.T) {
	g := load(t, "../../partition/testdata/split/tables-2x3/model.yaml")
	local := filepath.Join(t.TempDir(), "local.safetensors")
	if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 25, Batch: 16, Save: local, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	dist := runTableJob(t, g, 2, 3, false, trainer.RunOptions{Steps: 25, Batch: 8, Log: zerolog.Nop()})
	compareParams(t, local, dist, 1e-4)
}

// The same job with a cosine schedule, weight decay and clipping by value
// on the tables' row gradients (which apply to the rows a step touched)
// equals local training too.
func TestTablesWithScheduleAndClipEqualLocalInmem(t *testing.T) {
	path := "../../partition/testdata/split/tables-2x3/model.yaml"
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	src = []byte(strings.Replace(string(src), "  optimizer: {type: adagrad, lr: 0.1}",
		"  clip: {value: 0.05}\n  optimizer: {type: adagrad, weight_decay: 0.1, lr: {value: 0.1, schedule: cosine, warmup: 5, steps: 25}}", 1))
	g, err := dsl.LoadBytes(path, src)
	if err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(t.TempDir(), "local.safetensors")
	if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 25, Batch: 16, Save: local, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	dist := runTableJob(t, g, 2, 3, false, trainer.RunOptions{Steps: 25, Batch: 8, Log: zerolog.Nop()})
	compareParams(t, local, dist, 1e-4)
}

// A 2x1 sync job of the sparse-table models (2 trainers x batch 8 = the
// references' batch 16) ends where torch's sparse path ends after 50 steps
// (testdata/sparse/gen_reference.py), as local training does.
func TestShardedTableMatchesTorch(t *testing.T) {
	for _, name := range []string{"sgd", "adagrad", "adam"} {
		t.Run(name, func(t *testing.T) {
			g := load(t, "../../testdata/sparse/emb-"+name+".yaml")
			dist := runTableJob(t, g, 2, 1, false, trainer.RunOptions{Steps: 50, Batch: 8, InitFrom: "../../testdata/sparse/init.safetensors", Log: zerolog.Nop()})
			compareParams(t, "../../testdata/sparse/"+name+".safetensors", dist, 1e-3)
		})
	}
}

// A trainer of a table job cannot evaluate the whole data set (it holds
// only the rows it fetched): its summary's loss is the mean of the losses
// of its last 100 steps, as its --metrics file logged them.
func TestTableJobSummaryIsTailMean(t *testing.T) {
	g := load(t, "../../testdata/sparse/emb-adagrad.yaml")
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	sums := runInmemJob(t, g, 2, 1, false, trainer.RunOptions{Steps: 130, Batch: 8, LogEvery: 1, Metrics: metrics, InitFrom: "../../testdata/sparse/init.safetensors", Log: zerolog.Nop()}, 0)
	b, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 130 {
		t.Fatalf("%d metrics lines, want 130", len(lines))
	}
	var sum float64
	for _, l := range lines[30:] {
		var rec struct{ Loss float64 }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		sum += rec.Loss
	}
	first, last := lines[30], lines[129]
	if first == last {
		t.Fatal("the loss did not move; the test would not discriminate")
	}
	// the log writes 6 significant digits
	if want := sum / 100; math.Abs(sums[0].Loss-want) > 1e-5*math.Abs(want) {
		t.Fatalf("summary loss %v, the mean of the last 100 logged losses is %v", sums[0].Loss, want)
	}
}

// hangWatch fails the test binary with every goroutine's stack if the
// caller has not returned (called the func it got) within d: a job that
// hangs shows where its nodes wait instead of running into go test's
// timeout.
func hangWatch(t *testing.T, d time.Duration, what string) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(d):
			buf := make([]byte, 4<<20)
			buf = buf[:runtime.Stack(buf, true)]
			fmt.Fprintf(os.Stderr, "%s\n", buf)
			panic(fmt.Sprintf("%s: %s did not finish within %v; a node hangs (the stacks are above)", t.Name(), what, d))
		}
	}()
	return func() { close(done) }
}

// evalModel is a model's loss over its whole data set with the parameters
// of a safetensors file.
func evalModel(t *testing.T, g *dsl.Graph, file string) float64 {
	t.Helper()
	loaded, err := data.LoadSplit(g.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := loaded.Train
	ts, _, err := modelfile.LoadSafetensors(file)
	if err != nil {
		t.Fatal(err)
	}
	loss, _, err := evaluateAll(g, set, nil, program.Scope(ts), evaluate.EvalChunk)
	if err != nil {
		t.Fatal(err)
	}
	return loss
}

// An async job on a sharded table trains and ends: every pserver serves
// requests as they come while it waits for a row gradient, so no two
// shards wait for each other's trainers (before, each shard served one
// request and then waited for a gradient: two shards answering different
// trainers first waited forever). Every node returns, and the merged
// model is as good as local training's on the same data.
func TestShardedTableAsyncInmem(t *testing.T) {
	const init = "../../testdata/sparse/init.safetensors"
	for _, c := range []struct {
		opt  string
		n, m int
	}{{"adagrad", 2, 2}, {"adam", 2, 2}, {"sgd", 3, 3}, {"adam", 1, 2}} {
		t.Run(fmt.Sprintf("%s/%dx%d", c.opt, c.n, c.m), func(t *testing.T) {
			g := load(t, "../../testdata/sparse/emb-"+c.opt+".yaml")
			local := filepath.Join(t.TempDir(), "local.safetensors")
			if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 300, Batch: 8 * c.n, InitFrom: init, Save: local, Log: zerolog.Nop()}); err != nil {
				t.Fatal(err)
			}
			for run := range 3 { // the hang depended on arrival order
				served = nil
				stop := hangWatch(t, 60*time.Second, "the async table job")
				dist := runTableJob(t, g, c.n, c.m, true, trainer.RunOptions{Steps: 300, Batch: 8, InitFrom: init, Log: zerolog.Nop()})
				stop()
				if len(served) != c.m {
					t.Fatalf("run %d: %d of %d pservers returned a summary", run, len(served), c.m)
				}
				l0, ll, la := evalModel(t, g, init), evalModel(t, g, local), evalModel(t, g, dist)
				t.Logf("run %d: loss %.4f at the start, %.4f local, %.4f async", run, l0, ll, la)
				if la > 1.1*ll || la > 0.75*l0 {
					t.Errorf("run %d: async loss %.4f, local %.4f (start %.4f): the async job did not train", run, la, ll, l0)
				}
			}
		})
	}
}

// A pserver started --init-from a whole-table file takes its strided rows
// (row j + i*M of the file as its local row i); optimizer state absent
// from the file starts from its initializer. TestShardedTableEqualsLocalInmem
// shows the job then trains what local training from the file trains
// (with the rows taken contiguously instead, it fails: relative
// difference ~1.3).
func TestTableShardsInitFromStridedRows(t *testing.T) {
	const init = "../../testdata/sparse/init.safetensors"
	file, _, err := modelfile.LoadSafetensors(init)
	if err != nil {
		t.Fatal(err)
	}
	whole := file["emb"]
	d := whole.RowWidth()
	g := load(t, "../../testdata/sparse/emb-adagrad.yaml")
	for _, m := range []int{2, 3} {
		plan, err := partition.Split(g, partition.Options{Trainers: 2, PServers: m})
		if err != nil {
			t.Fatal(err)
		}
		for j, pg := range plan.PServers {
			prog, err := program.Compile(pg, program.CompileOptions{Sequential: true, Node: kernels.Node{Role: ir.PServerRole}})
			if err != nil {
				t.Fatal(err)
			}
			defer prog.Close()
			if err := program.Init(prog, program.InitOptions{From: init, Partial: true}); err != nil {
				t.Fatal(err)
			}
			shard := prog.Scope[fmt.Sprintf("emb.s%d", j)]
			if want := (40 - j + m - 1) / m; shard.Shape[0] != want {
				t.Fatalf("%dx%d pserver-%d: shard of %d rows, want %d", 2, m, j, shard.Shape[0], want)
			}
			for i := range shard.Shape[0] {
				r := j + i*m
				for k := range d {
					if shard.F[i*d+k] != whole.F[r*d+k] {
						t.Fatalf("M=%d pserver-%d: local row %d is not row %d of the file", m, j, i, r)
					}
				}
			}
			for _, x := range prog.Scope[fmt.Sprintf("emb.s%d@sum", j)].F {
				if x != 0 {
					t.Fatalf("M=%d pserver-%d: adagrad's sum, absent from the file, is not its zeros", m, j)
				}
			}
		}
	}
}

// A table job stopped and rerun from its pservers' checkpoints (shards and
// their optimizer state, and the dense blocks) ends bitwise where the
// uninterrupted job ends, sync and async with one trainer (async with
// more is not deterministic), for adam, whose state includes per-shard
// scalars.
func TestTableJobCheckpointResumeInmem(t *testing.T) {
	const init = "../../testdata/sparse/init.safetensors"
	for _, c := range []struct {
		n, m  int
		async bool
	}{{2, 2, false}, {2, 3, false}, {1, 2, true}} {
		t.Run(fmt.Sprintf("%dx%d/async=%v", c.n, c.m, c.async), func(t *testing.T) {
			g := load(t, "../../testdata/sparse/emb-adam.yaml")
			whole := runTableJob(t, g, c.n, c.m, c.async, trainer.RunOptions{Steps: 40, Batch: 8, InitFrom: init, Log: zerolog.Nop()})
			ck := &modelfile.Checkpointer{Dir: filepath.Join(t.TempDir(), "ck"), Every: 10}
			runTableJob(t, g, c.n, c.m, c.async, trainer.RunOptions{Steps: 25, Batch: 8, InitFrom: init, Log: zerolog.Nop(), Checkpoint: ck})
			for i := range c.m {
				saved, err := (&modelfile.Checkpointer{Dir: ck.Dir, Node: fmt.Sprintf("pserver-%d", i)}).Load(20)
				if err != nil {
					t.Fatal(err)
				}
				for _, name := range []string{"emb.s%d", "emb.s%d@m", "emb.s%d@v", "emb.s%d@bias1"} {
					if n := fmt.Sprintf(name, i); saved[n] == nil {
						t.Errorf("pserver-%d's checkpoint of step 20 holds %v, not %s", i, keys(saved), n)
					}
				}
			}
			resumed := runTableJob(t, g, c.n, c.m, c.async, trainer.RunOptions{Steps: 40, Batch: 8, InitFrom: init, Log: zerolog.Nop(), Checkpoint: ck, StartStep: -1})
			compareParams(t, whole, resumed, 0)
		})
	}
}

// Trainer 0 of a table job evaluates the held-out rows with table rows
// pulled from the pservers; at the end, sync and async, its numbers are
// those of the whole model it saved, evaluated as psgraph eval does (an
// async shard answers the final pulls once every trainer's updates are
// in, as it does for the saved model).
func TestTableJobHeldOutEqualsEvalInmem(t *testing.T) {
	g := load(t, "../../testdata/eval/ids-heldout.yaml")
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			save := filepath.Join(t.TempDir(), "model.safetensors")
			sums := runInmemJob(t, g, 2, 2, async, trainer.RunOptions{Steps: 50, Batch: 8, Save: save, Log: zerolog.Nop()}, 0)
			res, err := evaluate.EvalModel(context.Background(), g, evaluate.EvalOptions{InitFrom: save, Log: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			s := sums[0]
			if s.Eval == nil || s.EvalRows != res.Rows || s.Eval["eval_loss"] != res.Loss || s.Eval["eval_acc"] != res.Metrics["acc"] {
				t.Fatalf("trainer 0 evaluated %v over %d rows; the saved model evaluates to loss %v, acc %v over %d", s.Eval, s.EvalRows, res.Loss, res.Metrics["acc"], res.Rows)
			}
			if sums[1].Eval != nil {
				t.Errorf("trainer 1 evaluated the held-out data too: %v", sums[1].Eval)
			}
		})
	}
}
