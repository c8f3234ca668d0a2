package job

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/trainer"
	"github.com/psgraph/psgraph/transport"
)

// dynamicLive is the live rows of table over the pservers' summaries of
// the jobs runJobInmem ran since the last call.
func dynamicLive(t *testing.T, table string) int64 {
	t.Helper()
	servedMu.Lock()
	defer servedMu.Unlock()
	var live int64
	for _, s := range served {
		live += s.Tables[table].Live
	}
	served = nil
	return live
}

// dynamicRows reads a model file's dynamic table as key -> row, and its
// dense tensors.
func dynamicRows(t *testing.T, path, table string) (map[int64][]float32, map[string][]float32) {
	t.Helper()
	ts, _, err := modelfile.LoadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	keys, rows := ts[table+".keys"], ts[table]
	if keys == nil || rows == nil {
		t.Fatalf("%s holds no %s.keys and %s", path, table, table)
	}
	d := rows.Shape[1]
	out := map[int64][]float32{}
	for i, k := range keys.L {
		if _, dup := out[k]; dup {
			t.Fatalf("%s: key %d twice", path, k)
		}
		out[k] = rows.F[i*d : (i+1)*d]
	}
	dense := map[string][]float32{}
	for n, x := range ts {
		if n != table && n != table+".keys" {
			dense[n] = x.F
		}
	}
	return out, dense
}

// runDynamicSplit trains g as an n x m job in process with batch b per
// trainer, trainer 0 saving the whole model; it returns the file and the
// live rows the pservers' summaries count.
func runDynamicSplit(t *testing.T, g *dsl.Graph, n, m int, async bool, steps, b int) (string, int64) {
	t.Helper()
	dynamicLive(t, "")
	save := filepath.Join(t.TempDir(), "dist.safetensors")
	runInmemJob(t, g, n, m, async, trainer.RunOptions{Steps: steps, Batch: b, Save: save, Log: zerolog.Nop()}, 0)
	return save, dynamicLive(t, "emb")
}

// A dynamic table sharded by key over M pservers trains what one node
// trains: N sync trainers with batch b against one node with batch N*b
// give the same keys (the live rows: every trainer's sightings of a step
// are counted before any is answered, so min_count admits as on one
// node), and the same rows and dense parameters up to float32 rounding:
// one node sums a key's gradient over the whole batch in batch order,
// the job sums each trainer's half and then averages the halves, and
// float32 addition is not associative (so not bitwise; relative
// difference <= 1e-5); with one trainer nothing is averaged and the job
// is bitwise the local run. Trainer 0's --save pulls every shard's keys and
// rows into one file, which eval reads to the loss local eval gives.
func TestDynamicSplitEqualsLocalInmem(t *testing.T) {
	for _, c := range []struct {
		dynamic  string
		opt      string
		n, m     int
		minCount int
	}{
		{"{dim: 4, min_count: 2}", "adagrad, lr: 0.1", 2, 2, 2},
		{"{dim: 4}", "sgd, lr: 0.1", 2, 3, 1},
		{"{dim: 4, min_count: 3, ttl_steps: 5}", "adam, lr: 0.01", 2, 2, 3},
		{"{dim: 4, min_count: 3}", "adam, lr: 0.01", 2, 2, 3},
		{"{dim: 4, min_count: 2, ttl_steps: 5}", "adam, lr: 0.01", 2, 2, 3},
		{"{dim: 4, ttl_steps: 5}", "adam, lr: 0.01", 2, 2, 3},
		{"{dim: 4, min_count: 2}", "adagrad, lr: 0.1", 1, 2, 2},
	} {
		t.Run(fmt.Sprintf("%s/%s/%dx%d", c.dynamic, c.opt, c.n, c.m), func(t *testing.T) {
			g, _ := dynamicJobWith(t, c.dynamic, c.opt)
			const steps, b = 20, 8
			local := filepath.Join(t.TempDir(), "local.safetensors")
			sum, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: steps, Batch: b * c.n, Save: local, Log: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			dist, live := runDynamicSplit(t, g, c.n, c.m, false, steps, b)
			if want := sum.Tables[0].Live; live != want || want == 0 {
				t.Errorf("the pservers hold %d live rows, one node %d", live, want)
			}
			lr, ld := dynamicRows(t, local, "emb")
			dr, dd := dynamicRows(t, dist, "emb")
			if len(lr) != len(dr) {
				t.Fatalf("%d keys saved by the job, %d by one node", len(dr), len(lr))
			}
			var a, bb []float32
			for k, x := range lr {
				y, ok := dr[k]
				if !ok {
					t.Fatalf("key %d saved by one node, not by the job", k)
				}
				a, bb = append(a, x...), append(bb, y...)
			}
			worst := relDiff(bb, a)
			for n, x := range ld {
				if d := relDiff(dd[n], x); d > worst {
					worst = d
				}
			}
			t.Logf("%d keys; largest relative difference %.2g", len(lr), worst)
			if worst > 1e-5 || c.n == 1 && worst != 0 {
				t.Errorf("relative difference %.2g > 1e-5 (one trainer: want 0, nothing is averaged)", worst)
			}
			le, err := evaluate.EvalModel(context.Background(), g, evaluate.EvalOptions{InitFrom: local, Log: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			de, err := evaluate.EvalModel(context.Background(), g, evaluate.EvalOptions{InitFrom: dist, Log: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			if d := relDiff([]float32{float32(de.Loss)}, []float32{float32(le.Loss)}); d > 1e-5 {
				t.Errorf("eval of the job's file: loss %v, of one node's %v", de.Loss, le.Loss)
			}
		})
	}
}

// An async job trains a dynamic table too: every key seen min_count
// times over the job has a row (admission counts each request's
// sightings as it comes), and the saved file holds exactly the live rows.
func TestDynamicSplitAsyncInmem(t *testing.T) {
	g, counts := dynamicJob(t, "{dim: 4, min_count: 2}")
	const steps, b = 25, 8 // 2 x 25 x 8 = 400 rows: the file once
	dist, live := runDynamicSplit(t, g, 2, 2, true, steps, b)
	rows, _ := dynamicRows(t, dist, "emb")
	var want []int64
	for k, c := range counts {
		if c >= 2 {
			want = append(want, k)
		}
	}
	var got []int64
	for k := range rows {
		got = append(got, k)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) || live != int64(len(want)) {
		t.Errorf("%d keys saved, %d live: want the %d keys seen twice", len(got), live, len(want))
	}
}

// A pserver holding a shard of a dynamic table, stopped mid-run and
// started again, resumes from its checkpoint as with a fixed table: each
// checkpoint cuts the shard into its snapshot-and-deltas chain
// (modelfile.TableChain) before the node's manifest lists the step, and
// the new process applies the chain to an empty table. Restarted at its
// checkpoint's step (the staged cases, as TestPServerRestartTableInmem
// stages them: one trainer a step ahead, a request lost with the old
// process), the job ends bitwise as an undisturbed one; restarted
// wherever it falls, sync and async, with the loss of an undisturbed one
// (async: within 1.5x the worst of five, whose losses vary run to run).
func TestPServerRestartDynamicInmem(t *testing.T) {
	g, _ := dynamicJob(t, "{dim: 4, min_count: 2, ttl_steps: 40}")
	const steps, batch = 400, 8
	plain, _ := runDynamicSplit(t, g, 2, 2, false, steps, batch)
	for _, c := range []struct {
		name   string
		victim int
		async  bool
		stage  func(*restartCase) []int
	}{
		{"one trainer ahead", 1, false, stageOneAhead},
		{"a request lost", 0, false, stageDynamicRequestLost},
		{"unstaged", 1, false, nil},
		{"unstaged", 0, true, nil},
	} {
		t.Run(fmt.Sprintf("%s/pserver-%d/async=%v", c.name, c.victim, c.async), func(t *testing.T) {
			rc := restartCase{g: g, async: c.async, steps: steps, batch: batch, every: 25, killAfter: 100, victim: c.victim}
			var wantResent []int
			if c.stage != nil {
				wantResent = c.stage(&rc)
			}
			r := runRestartCase(t, rc)
			t.Logf("stopped with checkpoint %d; restarted at step %d; the trainers re-sent %v messages", r.killedAt, r.second.First, resentBy(t, r.trainers))
			if !strings.Contains(r.log, "restarted into a running job") {
				t.Errorf("the restarted pserver did not say it joined a running job:\n%s", r.log)
			}
			chain := &modelfile.TableChain{Dir: r.ckDir, Node: fmt.Sprintf("pserver-%d", c.victim), Table: fmt.Sprintf("emb.s%d", c.victim)}
			links, err := chain.Links()
			if err != nil {
				t.Fatal(err)
			}
			if len(links) == 0 || !links[0].Snapshot || links[len(links)-1].Step != r.manifest.Steps[len(r.manifest.Steps)-1] {
				t.Errorf("pserver-%d's chain %+v, its checkpoints %v: want a snapshot, then deltas up to the newest checkpoint", c.victim, links, r.manifest.Steps)
			}
			if r.second.Tables["emb"].Live == 0 {
				t.Errorf("the restarted pserver's summary holds no live rows: %+v", r.second.Tables)
			}
			if c.stage != nil {
				if r.second.First != 100 || fmt.Sprint(resentBy(t, r.trainers)) != fmt.Sprint(wantResent) {
					t.Errorf("restarted at %d with the trainers re-sending %v, want 100 and %v", r.second.First, resentBy(t, r.trainers), wantResent)
				}
				sameBytes(t, plain, r.saved[0]) // nothing lost: the same keys, rows and dense parameters
				return
			}
			// Unstaged, the restarted shard resumes from its checkpoint while
			// the job went on: the steps in between are lost for its keys,
			// how many depends on when the kill lands (0 to 21 seen). Each
			// costs the final loss ~0.5% (0 lost: 0.0368, as undisturbed;
			// 11: 0.0390; 13: 0.0398; 21: 0.0412), so the bound allows 1% a
			// lost step on top of 10%; a restart that lost more than 50
			// steps fails by itself.
			lost := int(r.second.First - r.killedAt)
			if lost > 50 {
				t.Errorf("the restarted pserver resumed %d steps after its checkpoint %d (at %d): want at most 50", lost, r.killedAt, r.second.First)
			}
			lp, lr, tol := evalModel(t, g, plain), evalModel(t, g, r.saved[0]), 1.1+0.01*float64(max(lost, 0))
			if c.async {
				// An async job's loss on this file (labels that are coin
				// flips, memorized over 16 passes) varies from run to run:
				// 30 undisturbed runs gave 0.061 to 0.271 (median 0.13),
				// 15 restarted ones 0.072 to 0.130. Against the mean of
				// five undisturbed runs, x1.5 failed once in CI (0.124
				// against five that happened to average 0.078), so the
				// bound is the worst of five, with room (the staged cases
				// above check the restored state itself, bitwise). The
				// worst of five can still be low (0.102 under CI's -race
				// load, against a restarted run's 0.163, inside the
				// undisturbed spread), so a loss within that spread
				// (asyncSpread) passes too; a restart that lost the
				// learned table ends near ln 2 = 0.69, coin flips.
				lp, tol = 0, 1.5
				for range 5 {
					ref, _ := runDynamicSplit(t, g, 2, 2, true, steps, batch)
					lp = max(lp, evalModel(t, g, ref))
				}
				lp = max(lp, asyncSpread/tol)
			}
			t.Logf("loss %.4f undisturbed (async: the worst of five), %.4f with the restart, %d steps lost", lp, lr, lost)
			if lr > tol*lp {
				t.Errorf("loss %.4f after the restart, %.4f undisturbed (x%.2f allowed)", lr, lp, tol)
			}
		})
	}
}

// asyncSpread bounds the loss of an undisturbed async run of
// TestPServerRestartDynamicInmem's job: 30 runs gave 0.061 to 0.271.
const asyncSpread = 0.30

// stageDynamicRequestLost stages "a request lost" for a dynamic table:
// pserver-0 (W and a shard) dies at step 100 holding trainer-0's request
// of 100, while trainer-1's is held until the old process is gone (lost
// with it). A sync dynamic shard answers no request of a step before it
// counted every trainer's (dyn_serve), so neither trainer has its rows of
// 100: each re-sends its request of 100, nothing else.
func stageDynamicRequestLost(rc *restartCase) (resent []int) {
	ids := ops.TableIDs("emb")
	t0Asked, t1Held, release := newSignal(), newSignal(), newSignal()
	rc.wrap = func(i int, ep transport.Endpoint) transport.Endpoint {
		h := &hookedEP{Endpoint: ep}
		if i == 0 {
			h.afterSend = func(to transport.NodeID, step int64, v string) {
				if to == transport.PServer(0) && v == ids && step == 100 {
					t0Asked.fire()
				}
			}
		} else {
			h.beforeSend = func(ctx context.Context, to transport.NodeID, step int64, v string) error {
				if to == transport.PServer(0) && v == ids && step == 100 {
					t1Held.fire()
					return release.wait(ctx)
				}
				return nil
			}
		}
		return h
	}
	rc.ready = func(ctx context.Context) error {
		if err := t0Asked.wait(ctx); err != nil {
			return err
		}
		return t1Held.wait(ctx)
	}
	rc.killed = release.fire
	return []int{1, 1}
}

// Trainer 0 of a job with a dynamic table evaluates the held-out rows
// with the rows of their keys pulled from the shards (a key without a row
// reads the default); at the end, sync and async, its numbers are those
// of the whole model it saved, evaluated as psgraph eval does. Trainer 1
// evaluates nothing.
func TestDynamicSplitHeldOutEqualsEvalInmem(t *testing.T) {
	g, _ := dynamicJob(t, "{dim: 4, min_count: 2}")
	src, err := os.ReadFile(g.File)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(g.File), "eval.yaml")
	edited := strings.Replace(string(src), "  csv: d.csv\n", "  csv: d.csv\n  eval: {fraction: 0.25}\n", 1)
	edited = strings.Replace(edited, "steps: 50,", "steps: 50, eval_every: 10,", 1)
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	g = load(t, path)
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			save := filepath.Join(t.TempDir(), "model.safetensors")
			sums := runInmemJob(t, g, 2, 2, async, trainer.RunOptions{Steps: 50, Batch: 8, Save: save, Log: zerolog.Nop()}, 0)
			res, err := evaluate.EvalModel(context.Background(), g, evaluate.EvalOptions{InitFrom: save, Log: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			s := sums[0]
			if s.Eval == nil || s.EvalRows != res.Rows || res.Rows == 0 || s.Eval["eval_loss"] != res.Loss {
				t.Fatalf("trainer 0 evaluated %v over %d rows; the saved model evaluates to loss %v over %d", s.Eval, s.EvalRows, res.Loss, res.Rows)
			}
			if sums[1].Eval != nil {
				t.Errorf("trainer 1 evaluated the held-out data too: %v", sums[1].Eval)
			}
		})
	}
}

// Each pserver's Prometheus metrics report its shard of a dynamic table
// under the table's name, as its summary line does: live rows, admissions
// and bytes (psgraph_dynamic_table_*).
func TestDynamicSplitMetrics(t *testing.T) {
	g, _ := dynamicJob(t, "{dim: 4, min_count: 2}")
	nodes := map[transport.NodeID]*metrics.Node{}
	var mu sync.Mutex
	pserverProm = func(id transport.NodeID) *metrics.Node {
		mu.Lock()
		defer mu.Unlock()
		nodes[id] = metrics.New(id.String())
		return nodes[id]
	}
	defer func() { pserverProm = nil }()
	_, live := runDynamicSplit(t, g, 2, 2, false, 20, 8)
	var total float64
	for id, n := range nodes {
		families, err := n.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "table" && l.GetValue() == "emb" && strings.HasPrefix(f.GetName(), "psgraph_dynamic_table_") {
						got[f.GetName()] += m.GetGauge().GetValue() + m.GetCounter().GetValue()
					}
				}
			}
		}
		if got["psgraph_dynamic_table_live_rows"] <= 0 || got["psgraph_dynamic_table_admitted_total"] != got["psgraph_dynamic_table_live_rows"] || got["psgraph_dynamic_table_bytes"] <= 0 {
			t.Errorf("%s's metrics of emb %v: want live rows, as many admissions (no eviction), bytes", id, got)
		}
		total += got["psgraph_dynamic_table_live_rows"]
	}
	if len(nodes) != 2 || total != float64(live) {
		t.Errorf("%d pservers' metrics count %v live rows, their summaries %d", len(nodes), total, live)
	}
}

// A dynamic table's capacity bounds the live rows of the whole table: each
// of M shards holds ceil(capacity / M) rows at a step boundary (LRU and
// LFU), so the job's live rows after its last step are at most the
// capacity plus the last step's new keys, as on one node. (With the whole
// capacity per shard, the LRU job ends with 123 live rows here; LFU, which
// evicts every row of the lowest priority at once, stays under the bound
// either way.)
func TestDynamicSplitCapacity(t *testing.T) {
	for _, policy := range []string{"lru", "lfu"} {
		t.Run(policy, func(t *testing.T) {
			g, counts := dynamicJob(t, "{dim: 4, capacity: 60, policy: "+policy+"}")
			_, live := runDynamicSplit(t, g, 2, 2, false, 25, 8) // the file once
			const lastStep = 2 * 8 * 3                           // the most keys a step adds
			if live <= 0 || live > 60+lastStep || len(counts) <= 2*(60+lastStep) {
				t.Errorf("%d live rows of %d keys; want at most the capacity 60 + %d", live, len(counts), lastStep)
			}
		})
	}
}

// --init-from a model file with a dynamic table starts a split job's
// shards from it: each pserver loads the file's keys its shard holds
// (dyntable.ShardOf), so N trainers with batch b from the file train what
// one node with batch N*b trains from it (float32 summation order aside,
// as TestDynamicSplitEqualsLocalInmem says).
func TestDynamicSplitInitFrom(t *testing.T) {
	g, _ := dynamicJob(t, "{dim: 4, min_count: 2}")
	dir := t.TempDir()
	init := filepath.Join(dir, "init.safetensors")
	if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 20, Batch: 16, Save: init, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(dir, "local.safetensors")
	if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 5, Batch: 16, InitFrom: init, Save: local, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	dist := filepath.Join(dir, "dist.safetensors")
	runInmemJob(t, g, 2, 2, false, trainer.RunOptions{Steps: 5, Batch: 8, InitFrom: init, Save: dist, Log: zerolog.Nop()}, 0)
	lr, ld := dynamicRows(t, local, "emb")
	dr, dd := dynamicRows(t, dist, "emb")
	ir, _ := dynamicRows(t, init, "emb")
	if len(dr) != len(lr) || len(dr) < len(ir) {
		t.Fatalf("%d keys after the job, %d after one node, %d in the file", len(dr), len(lr), len(ir))
	}
	var a, b []float32
	for k, x := range lr {
		a, b = append(a, x...), append(b, dr[k]...)
	}
	worst := relDiff(b, a)
	for n, x := range ld {
		worst = max(worst, relDiff(dd[n], x))
	}
	if worst > 1e-5 {
		t.Errorf("relative difference %.2g > 1e-5", worst)
	}
}

// A job with a dynamic table stopped after a checkpoint and rerun from
// the pservers' checkpoints (each shard's chain up to the step, the dense
// blocks, the trainers starting there) ends bitwise where the
// uninterrupted job ends: keys, rows and dense parameters (sync 2x2 and
// 2x3; async with one trainer).
func TestDynamicJobCheckpointResumeInmem(t *testing.T) {
	g, _ := dynamicJobWith(t, "{dim: 4, min_count: 2, ttl_steps: 15}", "adam, lr: 0.01")
	for _, c := range []struct {
		n, m  int
		async bool
	}{{2, 2, false}, {2, 3, false}, {1, 2, true}} {
		t.Run(fmt.Sprintf("%dx%d/async=%v", c.n, c.m, c.async), func(t *testing.T) {
			whole, _ := runDynamicSplit(t, g, c.n, c.m, c.async, 40, 8)
			ck := &modelfile.Checkpointer{Dir: filepath.Join(t.TempDir(), "ck"), Every: 10}
			run := func(steps, start int) string {
				save := filepath.Join(t.TempDir(), "m.safetensors")
				runInmemJob(t, g, c.n, c.m, c.async, trainer.RunOptions{Steps: steps, Batch: 8, Save: save, Log: zerolog.Nop(), Checkpoint: ck, StartStep: start}, 0)
				return save
			}
			run(25, 0)
			for i := range c.m {
				links, err := (&modelfile.TableChain{Dir: ck.Dir, Node: fmt.Sprintf("pserver-%d", i), Table: fmt.Sprintf("emb.s%d", i)}).Links()
				if err != nil || len(links) == 0 || links[len(links)-1].Step != 25 {
					t.Errorf("pserver-%d's chain %+v (%v): want links up to the last step, 25", i, links, err)
				}
			}
			resumed := run(40, -1)
			sameBytes(t, whole, resumed)
		})
	}
}
