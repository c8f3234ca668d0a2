package job

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/data/criteo"
	"github.com/psgraph/psgraph/exec/trainer"
	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
	"github.com/rs/zerolog"
)

// bundleModel is three fixed tables of widths 4, 8 and 2, the last read
// by two lookups (by both id columns), the ids reshaped from the data
// between the lookups (so split moves those reshapes before the bundled
// fetch), and a quarter of the rows held out: trainer 0's evaluation
// pulls rows through the bundle's request.
func bundleModel(t *testing.T) *dsl.Graph {
	t.Helper()
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(5, 6))
	var b strings.Builder
	for range 640 {
		a, c := r.IntN(50), r.IntN(30)
		y := 0
		if (a*7+c*3)%5 < 2 {
			y = 1
		}
		fmt.Fprintf(&b, "%d,%d,%d\n", y, a, c)
	}
	if err := os.WriteFile(filepath.Join(dir, "d.csv"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	src := `psgraph: 1
name: bundle
data:
  csv: d.csv
  label: {name: y, column: 0, dtype: float32}
  ids:
    - {name: a, column: 1}
    - {name: c, column: 2}
  eval: {fraction: 0.25}
params:
  ea: {shape: [50, 4], init: {type: normal, std: 0.1, seed: 1}}
  eb: {shape: [30, 8], init: {type: normal, std: 0.1, seed: 2}}
  ec: {shape: [50, 2], init: {type: normal, std: 0.1, seed: 3}}
  w: {shape: [16, 1], init: {type: normal, std: 0.1, seed: 4}}
ops:
  - {type: reshape, inputs: [a], outputs: [ia], attrs: {shape: [-1]}}
  - {type: lookup_table, inputs: [ea, ia], outputs: [xa]}
  - {type: reshape, inputs: [c], outputs: [ic], attrs: {shape: [-1]}}
  - {type: lookup_table, inputs: [eb, ic], outputs: [xb]}
  - {type: lookup_table, inputs: [ec, ia], outputs: [xc]}
  - {type: lookup_table, inputs: [ec, ic], outputs: [xd]}
  - {type: concat, inputs: [xa, xb, xc, xd], outputs: [h], attrs: {axis: 1}}
  - {type: matmul, inputs: [h, w], outputs: [logit]}
  - {type: sigmoid_cross_entropy, inputs: [logit, y], outputs: [loss]}
  - {type: auc, inputs: [logit, y], outputs: [auc]}
train:
  loss: loss
  metrics: [auc]
  batch: 16
  optimizer: {type: adagrad, lr: 0.1}
`
	path := filepath.Join(dir, "bundle.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return load(t, path)
}

// runPlanned runs g split with opt (written and read back, as split
// writes it) in memory and returns trainer 0's saved model and the
// trainers' summaries.
func runPlanned(t *testing.T, g *dsl.Graph, opt partition.Options, run trainer.RunOptions) (string, []*trainer.Summary, *partition.Plan) {
	t.Helper()
	plan := splitWritten(t, g, opt)
	run.Save = filepath.Join(t.TempDir(), "model.safetensors")
	j := &Job{Trainer: plan.Trainer, PServers: plan.PServers, Trainers: opt.Trainers, Async: opt.Mode == partition.Async, Params: plan.Info.ServedParams()}
	return run.Save, runJobInmem(t, j, run), plan
}

func countOps(g *dsl.Graph, typ string) int {
	n := 0
	for _, op := range g.Ops {
		if op.Type == typ {
			n++
		}
	}
	return n
}

// Bundling the fixed tables' fetches and row gradients into one message
// per trainer, pserver and direction changes no number: a sync job with
// the bundle saves byte for byte the model of the job with one transfer
// per table, and trainer 0's held-out evaluation, whose rows are pulled
// through the bundle's requests, gives the same loss and auc. An async
// job with the bundle trains too.
func TestBundledTablesEqualSeparate(t *testing.T) {
	g := bundleModel(t)
	for _, c := range []struct {
		n, m  int
		async bool
	}{{2, 2, false}, {2, 3, false}, {1, 2, false}, {2, 2, true}} {
		t.Run(fmt.Sprintf("%dx%d/async=%v", c.n, c.m, c.async), func(t *testing.T) {
			opt := partition.Options{Trainers: c.n, PServers: c.m}
			if c.async {
				opt.Mode = partition.Async
			}
			run := trainer.RunOptions{Steps: 30, Batch: 16, Log: zerolog.Nop()}
			bundled, bs, plan := runPlanned(t, g, opt, run)
			if countOps(plan.Trainer, "fetch_tables") != 1 || countOps(plan.Trainer, "fetch_rows") != 0 || countOps(plan.Trainer, "send_tables") != 1 {
				t.Fatalf("the plan did not bundle the three tables: %d fetch_tables, %d fetch_rows", countOps(plan.Trainer, "fetch_tables"), countOps(plan.Trainer, "fetch_rows"))
			}
			for i, ps := range plan.PServers {
				if countOps(ps, "serve_tables") != 1 || countOps(ps, "accumulate_tables") != 1 || countOps(ps, "serve_rows") != 0 {
					t.Fatalf("pserver-%d does not serve the bundle", i)
				}
			}
			// The fetched rows are the table's values at the batch's ids,
			// not a value computed over the batch's rows: the held-out
			// evaluation in chunks computes what the training batches do
			// (before, every split job with tables warned that it did not).
			if cp, err := plan.Trainer.Coupled("loss"); err != nil || cp != nil {
				t.Errorf("the trainer's loss is coupled across rows: %+v, %v", cp, err)
			}
			if bs[0].Eval == nil || bs[0].EvalRows == 0 {
				t.Fatalf("trainer 0 evaluated no held-out rows: %+v", bs[0])
			}
			if c.async {
				if l := bs[0].Eval["eval_loss"]; math.IsNaN(l) || l > 0.75 {
					t.Errorf("async bundled job: held-out loss %v", l)
				}
				return
			}
			opt.SeparateTables = true
			separate, ss, splan := runPlanned(t, g, opt, run)
			if countOps(splan.Trainer, "fetch_rows") != 3 {
				t.Fatalf("SeparateTables: %d fetch_rows, want 3", countOps(splan.Trainer, "fetch_rows"))
			}
			sameBytes(t, bundled, separate)
			for k, v := range ss[0].Eval {
				if bs[0].Eval[k] != v {
					t.Errorf("held-out %s: %v bundled, %v separate", k, bs[0].Eval[k], v)
				}
			}
			t.Logf("held-out %v over %d rows, both ways", bs[0].Eval, bs[0].EvalRows)
		})
	}
}

// DLRM split 2x2 (docs/split.md, bench/history-2026-12.md): its 26 tables'
// 156 transfers (ids, rows and row gradients per table and pserver)
// become the bundle's 6, so the plan's 184 send/recv pairs become 34.
func TestDLRMPlanBundlesItsTables(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	if _, err := criteo.Generate(&buf, criteo.Options{Rows: 200, Seed: 1, Truth: "fm"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "zoo.tsv"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	g := zooModel(t, "dlrm", dir)
	for _, c := range []struct {
		separate bool
		want     int
	}{{false, 34}, {true, 184}} {
		p, err := partition.Split(g, partition.Options{Trainers: 2, PServers: 2, SeparateTables: c.separate})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(p.Info.Transfers); n != c.want {
			t.Errorf("separate tables %v: %d send/recv pairs, want %d", c.separate, n, c.want)
		}
	}
}

// A pserver of a bundled job restarts as one of a per-table job does
// (TestPServerRestartTableInmem): staged so that it restarts at its
// checkpoint's step with trainer 0 a step ahead, the trainers re-send
// what the restart lost (the bundled request among it) and the job ends
// with the model of an undisturbed run, byte for byte; unstaged, sync and
// async, it rejoins and the job ends near the undisturbed loss.
func TestPServerRestartBundledInmem(t *testing.T) {
	g := bundleModel(t)
	plain, _, plan := runPlanned(t, g, partition.Options{Trainers: 2, PServers: 2}, trainer.RunOptions{Steps: 300, Batch: 8, Log: zerolog.Nop()})
	if countOps(plan.Trainer, "fetch_tables") != 1 {
		t.Fatal("the plan does not bundle the tables")
	}
	if w := plan.Info.Params[len(plan.Info.Params)-1]; w.Name != "w" || w.Blocks[0].PServer != 0 {
		t.Fatalf("the staged restart expects w on pserver-0, the plan has %+v", w)
	}
	for _, c := range []struct {
		name   string
		victim int
		async  bool
		stage  func(*restartCase) []int
	}{
		{"one trainer ahead", 1, false, stageOneAhead},
		{"unstaged", 0, false, nil},
		{"unstaged", 1, true, nil},
	} {
		t.Run(fmt.Sprintf("%s/pserver-%d/async=%v", c.name, c.victim, c.async), func(t *testing.T) {
			rc := restartCase{g: g, async: c.async, steps: 300, batch: 8, every: 50, killAfter: 100, victim: c.victim, table: ops.TableBundle, dense: "w"}
			var wantResent []int
			if c.stage != nil {
				wantResent = c.stage(&rc)
			}
			r := runRestartCase(t, rc)
			t.Logf("stopped with checkpoint %d; restarted at step %d; the trainers re-sent %v messages", r.killedAt, r.second.First, resentBy(t, r.trainers))
			if !strings.Contains(r.log, "restarted into a running job") {
				t.Errorf("the restarted pserver did not say it joined a running job:\n%s", r.log)
			}
			if c.stage != nil {
				if r.second.First != 100 || fmt.Sprint(resentBy(t, r.trainers)) != fmt.Sprint(wantResent) {
					t.Errorf("restarted at %d with the trainers re-sending %v, want 100 and %v", r.second.First, resentBy(t, r.trainers), wantResent)
				}
				sameBytes(t, plain, r.saved[0])
				return
			}
			lp, lr := evalModel(t, g, plain), evalModel(t, g, r.saved[0])
			t.Logf("loss %.4f undisturbed, %.4f with the restart", lp, lr)
			if lr > 1.1*lp {
				t.Errorf("loss %.4f after the restart, %.4f undisturbed", lr, lp)
			}
		})
	}
}

// A trainer run with a larger batch than a bundled plan was split for is
// refused before it sends anything, as with one transfer per table
// (TestTableTrainerBatchAbovePlan), counting the ids of every table of
// the bundle (the request's per-table counts are not rows).
func TestBundledTrainerBatchAbovePlan(t *testing.T) {
	g := bundleModel(t) // batch 16: 16 + 16 + 32 ids a step (ec is read by both columns); batch 32: 32 + 30 + 50 (capped by the tables' rows)
	plan, err := partition.Split(g, partition.Options{Trainers: 1, PServers: 2})
	if err != nil {
		t.Fatal(err)
	}
	j := &Job{Trainer: plan.Trainer, PServers: plan.PServers, Trainers: 1, Params: plan.Info.ServedParams()}
	eps := jobEndpoints(t, "inmem", j, 32, &rejections{})
	_, err = j.RunTrainer(context.Background(), 0, eps[transport.Trainer(0)], trainer.RunOptions{Steps: 1, Batch: 32, Log: zerolog.Nop()})
	want := "with batch 32 a trainer fetches up to 112 rows of its 3 tables per step, but pserver-0 accepts at most 64 (the plan was split for batch 16): run the trainers with --batch 16 or less"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a trainer of batch 32 on a bundled plan of batch 16: %v; want %q", err, want)
	}
	if tr := eps[transport.Trainer(0)].Traffic(); tr.Sent != 0 {
		t.Errorf("the trainer sent %d bytes before refusing", tr.Sent)
	}
	if err := j.tablesFit(16); err != nil {
		t.Errorf("batch 16: %v", err)
	}
}
