package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/pserver"
	"github.com/psgraph/psgraph/internal/testfix"
	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
)

// A real pserver (pserver.Serve, over the in-memory transport) serving
// a trainer's pulls of its dynamic shard while it writes checkpoints of
// it: the trainer's program runs step after step on keys the test
// chooses, and each step's pull (the request of the batch's keys to the
// rows answered, fetch_rows against dyn_serve) is timed and its reply
// kept. The pserver cuts its shard between steps on its loop and writes
// the cut beside the next steps (pserver.part.cutTables); its log says
// when each checkpoint is written, which places every pull inside or
// outside a write.

// pauseKeys is the keys of a row of the pause model's file.
const pauseKeys = 26

// pauseModel is a model reading a dynamic table alone (dim 16, adagrad):
// 26 int64 keys a row, the sum of their rows' values its logit.
func pauseModel(t testing.TB, batch int) *Job {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "d.csv"), []byte("1"+stringsRepeat(",7", pauseKeys)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf(`psgraph: 1
name: pause
data:
  csv: d.csv
  label: {name: y, column: 0, dtype: float32}
  ids: {name: keys, columns: [1, %d], key: int64}
params:
  emb: {dynamic: {dim: 16}, init: {type: normal, std: 0.01, seed: 1}}
ops:
  - {type: lookup_table, inputs: [emb, keys], outputs: [e]}
  - {type: sum, inputs: [e], outputs: [s], attrs: {axis: 2}}
  - {type: sum, inputs: [s], outputs: [logit], attrs: {axis: 1, keepdims: true}}
  - {type: sigmoid_cross_entropy, inputs: [logit, y], outputs: [loss]}
train: {loss: loss, batch: %d, steps: 1, optimizer: {type: adagrad, lr: 0.05}}
`, pauseKeys+1, batch)
	path := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	plan, err := partition.Split(load(t, path), partition.Options{Trainers: 1, PServers: 1})
	if err != nil {
		t.Fatal(err)
	}
	return &Job{Trainer: plan.Trainer, PServers: plan.PServers, Trainers: 1, Params: plan.Info.ServedParams()}
}

func stringsRepeat(s string, n int) string {
	var b []byte
	for range n {
		b = append(b, s...)
	}
	return string(b)
}

// pull is one step's pull as the trainer saw it.
type pull struct {
	step       int64
	start, end time.Time
	rows       uint64 // FNV-1a of the reply's bytes (keepRows)
}

// timedRendezvous is a trainer's communication that times each step's
// pull of table: from the request's send to the rows' arrival.
type timedRendezvous struct {
	*comm.Trainer
	ids, rows string
	keepRows  bool
	mu        sync.Mutex
	sent      time.Time
	pulls     []pull
}

func (r *timedRendezvous) Send(ctx context.Context, step int64, to ir.Node, v string, dt ir.DType, payload []byte) error {
	if v == r.ids {
		r.mu.Lock()
		r.sent = time.Now()
		r.mu.Unlock()
	}
	return r.Trainer.Send(ctx, step, to, v, dt, payload)
}

func (r *timedRendezvous) Recv(ctx context.Context, step int64, from ir.Node, v string, dst []byte) (int, error) {
	n, err := r.Trainer.Recv(ctx, step, from, v, dst)
	if err == nil && v == r.rows {
		end := time.Now()
		p := pull{step: step, end: end}
		if r.keepRows {
			h := fnv.New64a()
			h.Write(dst[:n])
			p.rows = h.Sum64()
		}
		r.mu.Lock()
		p.start = r.sent
		r.pulls = append(r.pulls, p)
		r.mu.Unlock()
	}
	return n, err
}

// savedLog is a pserver's log, keeping when each checkpoint was written.
type savedLog struct {
	mu    sync.Mutex
	saved map[int64]time.Time
}

func (l *savedLog) Write(b []byte) (int, error) {
	now := time.Now()
	var e struct {
		Message string `json:"message"`
		Step    int64  `json:"step"`
	}
	if json.Unmarshal(b, &e) == nil && e.Message == "checkpoint saved" {
		l.mu.Lock()
		l.saved[e.Step] = now
		l.mu.Unlock()
	}
	return len(b), nil
}

// pauseRun is a 1x1 job of pauseModel: a pserver checkpointing into
// ckDir every `every` steps (0: never) and a trainer whose step k pulls
// keys(k).
type pauseRun struct {
	batch, every int
	ckDir        string
	keepRows     bool
	steps        int
	keys         func(step int, dst []int64)
	// after, when set, runs after each trainer step (the step run).
	after func(step int)
}

// pauseResult is what a pauseRun saw.
type pauseResult struct {
	pulls   []pull
	saved   map[int64]time.Time // checkpoint step -> when the pserver logged it written
	summary *pserver.ServeSummary
}

func (pr pauseRun) run(t testing.TB) pauseResult {
	j := pauseModel(t, pr.batch)
	trainers, pservers := j.TrainerIDs(), j.PServerIDs()
	hub := transport.NewHub(func(err error) { t.Errorf("rejected: %v", err) }, append(trainers, pservers...)...)
	for _, id := range append(trainers, pservers...) {
		specs, err := j.Specs(id, pr.batch)
		if err != nil {
			t.Fatal(err)
		}
		hub.Endpoint(id).Accept(specs...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &savedLog{saved: map[int64]time.Time{}}
	var res pauseResult
	served := make(chan error, 1)
	go func() {
		so := pserver.ServeOptions{Log: zerolog.New(log), ResumeStep: -1}
		if pr.every > 0 {
			so.Checkpoint = &modelfile.Checkpointer{Dir: pr.ckDir, Every: pr.every, Node: pservers[0].String(), Model: j.PServers[0].Name}
		}
		sum, err := j.RunPServer(ctx, 0, hub.Endpoint(pservers[0]), so)
		res.summary = sum
		if err != nil {
			cancel()
		}
		served <- err
	}()
	tp, err := program.Compile(j.Trainer, program.CompileOptions{Batch: pr.batch, Node: kernels.Node{Role: ir.TrainerRole}})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	tp.OnError = func(error) { cancel() }
	ts, err := j.Trainer.Transfers(pr.batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := comm.NewTrainer(comm.Config{EP: hub.Endpoint(trainers[0]), Trainers: 1, Transfers: ts}, pservers)
	defer c.Close()
	if err := c.Join(ctx, j.Trainer, 0, pr.steps, pr.batch); err != nil {
		t.Fatal(err)
	}
	rv := &timedRendezvous{Trainer: c, ids: ops.TableIDs("emb"), rows: ops.TableRows("emb"), keepRows: pr.keepRows,
		pulls: make([]pull, 0, pr.steps)}
	rt := &program.Runtime{Ctx: ctx, RV: rv}
	keys, y := tp.Scope["keys"].L, tp.Scope["y"].F
	r := rand.New(rand.NewPCG(5, 6))
	fail := func(err error) {
		t.Helper()
		cancel()
		<-served
		t.Fatal(err)
	}
	for k := range pr.steps {
		pr.keys(k, keys)
		for i := range y {
			y[i] = float32(r.IntN(2))
		}
		rt.StepNum = int64(k)
		if err := c.Flush(ctx); err != nil {
			fail(err)
		}
		if err := tp.Run(rt); err != nil {
			fail(fmt.Errorf("trainer step %d: %w", k, err))
		}
		if pr.after != nil {
			pr.after(k)
		}
	}
	if err := c.Finish(ctx); err != nil {
		fail(err)
	}
	if errs := c.AwaitPeers(ctx); len(errs) > 0 {
		fail(errors.Join(errs...))
	}
	if err := <-served; err != nil {
		t.Fatalf("pserver-0: %v", err)
	}
	res.pulls = rv.pulls
	log.mu.Lock()
	res.saved = log.saved
	log.mu.Unlock()
	return res
}

// ckWindow is a checkpoint's write as the trainer's pulls met it: from
// the pull of its step (the first the pserver answers after cutting the
// shard) to when the pserver logged it written.
type ckWindow struct {
	step     int64
	snapshot bool
	end      time.Time
}

// windows lists the checkpoints of a run in step order; with the chain's
// default (modelfile.TableChain.SnapshotEvery 4) every fourth, from the
// first, is a snapshot.
func (res pauseResult) windows() []ckWindow {
	var out []ckWindow
	for step, end := range res.saved {
		out = append(out, ckWindow{step: step, end: end})
	}
	slices.SortFunc(out, func(a, b ckWindow) int { return int(a.step - b.step) })
	for i := range out {
		out[i].snapshot = i%4 == 0
	}
	return out
}

// during is the checkpoint whose write pull p met (its step at or after
// the checkpoint's, its request sent before the write ended), if any.
func during(p pull, ws []ckWindow) (ckWindow, bool) {
	for i := len(ws) - 1; i >= 0; i-- {
		if p.step >= ws[i].step {
			return ws[i], p.start.Before(ws[i].end)
		}
	}
	return ckWindow{}, false
}

// zipfKeys draws a batch's keys Zipf(1.05) over n keys (key i is
// mixKey(i)).
func zipfKeys(r *rand.Rand, n uint64) func(int, []int64) {
	z := rand.NewZipf(r, 1.05, 1, n-1)
	return func(_ int, dst []int64) {
		for i := range dst {
			dst[i] = mixKey(z.Uint64())
		}
	}
}

// mixKey spreads key i over 64 bits as a hashed feature's key (never the
// padding key).
func mixKey(i uint64) int64 {
	x := i + 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return int64((x ^ x>>31) &^ (1 << 63))
}

// A pserver answers the pulls of its dynamic shard while it writes the
// shard's snapshots and deltas in the background with exactly the rows
// it answers without checkpoints: run twice on the same keys, once
// cutting the shard after every step (so each cut's write runs beside
// the next step's pull, the next cut waiting for it) and once never,
// every step's reply is bitwise the same. A cut that let the walk's
// copy-on-write show a pull the row as it was at the cut, or a write
// that changed a row, would differ. The chain written restores the
// shard as it ended (its live rows).
func TestPullsDuringSnapshotsAreTheTable(t *testing.T) {
	const batch, fill = 64, 40 // 40 steps of new keys: 66,560 rows
	r := rand.New(rand.NewPCG(1, 2))
	zipf := zipfKeys(r, fill*batch*pauseKeys)
	plan := make([][]int64, 120)
	for k := range plan {
		plan[k] = make([]int64, batch*pauseKeys)
		if k < fill {
			for i := range plan[k] {
				plan[k][i] = mixKey(uint64(k*batch*pauseKeys + i))
			}
			continue
		}
		zipf(k, plan[k])
	}
	keys := func(k int, dst []int64) { copy(dst, plan[k]) }
	ck := t.TempDir()
	with := pauseRun{batch: batch, every: 1, ckDir: ck, keepRows: true, steps: len(plan), keys: keys}.run(t)
	plain := pauseRun{batch: batch, keepRows: true, steps: len(plan), keys: keys}.run(t)
	if len(with.pulls) != len(plan) || len(plain.pulls) != len(plan) {
		t.Fatalf("%d and %d pulls, want %d each", len(with.pulls), len(plain.pulls), len(plan))
	}
	ws := with.windows()
	met := 0
	for i, p := range with.pulls {
		if p.rows != plain.pulls[i].rows {
			t.Errorf("step %d: the pull's rows differ from the run without checkpoints", p.step)
		}
		if _, in := during(p, ws); in {
			met++
		}
	}
	t.Logf("%d checkpoints; %d of %d pulls were answered while one was being written", len(ws), met, len(plan))
	if len(ws) != len(plan) {
		t.Errorf("%d checkpoints written, want one a step (%d)", len(ws), len(plan))
	}
	live := with.summary.Tables["emb"].Live
	if live == 0 || live != plain.summary.Tables["emb"].Live {
		t.Errorf("live rows %d with checkpoints, %d without", live, plain.summary.Tables["emb"].Live)
	}
	restored := restoreShard(t, ck, int64(len(plan)))
	if restored.Stats().Live != live {
		t.Errorf("the chain restores %d live rows, the shard ended with %d", restored.Stats().Live, live)
	}
}

// restoreShard applies pserver-0's chain of emb.s0 up to step to a new
// table of the pause model's shard.
func restoreShard(t *testing.T, dir string, step int64) *dyntable.Table {
	t.Helper()
	j := pauseModel(t, 64)
	for _, part := range program.Components(j.PServers[0]) {
		p, err := program.Compile(part, program.CompileOptions{Sequential: true, Node: kernels.Node{Role: ir.PServerRole}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		for name, tab := range p.Tables {
			chain := &modelfile.TableChain{Dir: dir, Node: "pserver-0", Table: name}
			if err := chain.Restore(step, tab); err != nil {
				t.Fatal(err)
			}
			return tab
		}
	}
	t.Fatal("pserver-0 holds no dynamic shard")
	return nil
}

// BenchmarkPServerSnapshotPause measures what checkpoints of a large
// dynamic shard cost the pulls a real pserver answers: a 1x1 job of
// pauseModel over the in-memory transport, batches of 256 rows x 26 keys;
// the first 158 steps pull new keys (1,051,648 rows of dim 16 with
// adagrad's 16 floats of state), the next ones keys drawn Zipf(1.05) over
// them (~3,300 distinct a step), and the pserver checkpoints every 400
// steps: a snapshot, then three deltas, b.N times. Each step's pull (the
// trainer's request sent to the rows arrived) is classed as met by a
// snapshot's write (snap-*), by a delta's (delta-*), or by none (base-*),
// and the metrics are the percentiles of each class's wall-clock latency;
// cut-* are the pulls of the checkpoints' steps (the first the pserver
// answers after cutting the shard on its loop); *-cpu-ms/step is the
// process's processor time per step (trainer, pserver and writer
// together); *-max-rq-ms is the time the process's threads spent
// runnable but waiting for a processor during the step of the class's
// slowest pull, *-max-gsched-ms the longest a goroutine of the process
// waited for a Go processor in that step (runtime/metrics
// /sched/latencies, a bucket's upper bound: the writer, the pserver's
// loop and the trainer share GOMAXPROCS), and *-max-nonrq-ms the largest
// latency less its step's run-queue wait (what descheduling cannot
// account for); snap-s and delta-s are the writes' mean time.
func BenchmarkPServerSnapshotPause(b *testing.B) {
	const batch, fill, every = 256, 158, 400
	steps := 4*b.N*every + every/2
	r := rand.New(rand.NewPCG(1, 2))
	zipf := zipfKeys(r, fill*batch*pauseKeys)
	cpu, rq := make([]time.Duration, steps+1), make([]time.Duration, steps+1)
	q := &runQueue{}
	defer q.close()
	sl := newSchedLatency()
	sched := make([]time.Duration, steps+1)
	cpu[0], rq[0] = testfix.ProcessCPU(), q.wait()
	sl.since()
	res := pauseRun{batch: batch, every: every, ckDir: b.TempDir(), steps: steps,
		keys: func(k int, dst []int64) {
			if k >= fill {
				zipf(k, dst)
				return
			}
			for i := range dst {
				dst[i] = mixKey(uint64(k*len(dst) + i))
			}
		},
		after: func(k int) {
			cpu[k+1], rq[k+1], sched[k+1] = testfix.ProcessCPU(), q.wait(), sl.since()
		},
	}.run(b)
	b.StopTimer()
	ws := res.windows()
	classes := map[string]*pauseClass{"base": {}, "snap": {}, "delta": {}, "cut": {}}
	isCut := map[int64]bool{}
	for _, w := range ws {
		isCut[w.step] = true
	}
	for _, p := range res.pulls {
		if p.step < fill {
			continue // filling the table
		}
		lat, c := p.end.Sub(p.start), cpu[p.step+1]-cpu[p.step]
		wait, gwait := max(0, rq[p.step+1]-rq[p.step]), sched[p.step+1]
		if isCut[p.step] {
			classes["cut"].add(lat, 0, wait, gwait)
		}
		w, in := during(p, ws)
		switch {
		case !in:
			classes["base"].add(lat, c, wait, gwait)
		case w.snapshot:
			classes["snap"].add(lat, c, wait, gwait)
		default:
			classes["delta"].add(lat, c, wait, gwait)
		}
	}
	var snapS, deltaS float64
	for _, w := range ws {
		s := w.end.Sub(res.pulls[w.step].start).Seconds() / float64(b.N)
		if w.snapshot {
			snapS += s
		} else {
			deltaS += s / 3
		}
	}
	for name, c := range classes {
		if len(c.lat) == 0 {
			b.Fatalf("no pull of class %s: the run met no write of some kind", name)
		}
		c.report(b, name)
	}
	b.ReportMetric(snapS, "snap-s")
	b.ReportMetric(deltaS, "delta-s")
	b.ReportMetric(float64(res.summary.Tables["emb"].Live), "live-rows")
}

// pauseClass is the pulls of one class of BenchmarkPServerSnapshotPause.
type pauseClass struct {
	// per pull: its latency, its step's run-queue wait, the longest a
	// goroutine waited for a Go processor (P) in its step
	lat, wait, gwait []time.Duration
	cpu              time.Duration
}

func (c *pauseClass) add(lat, cpu, wait, gwait time.Duration) {
	c.lat, c.wait, c.gwait, c.cpu = append(c.lat, lat), append(c.wait, wait), append(c.gwait, gwait), c.cpu+cpu
}

func (c *pauseClass) report(b *testing.B, name string) {
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	worst, nonrq := 0, time.Duration(0)
	for i, l := range c.lat {
		if l > c.lat[worst] {
			worst = i
		}
		nonrq = max(nonrq, l-c.wait[i])
	}
	b.ReportMetric(ms(c.wait[worst]), name+"-max-rq-ms")
	b.ReportMetric(ms(c.gwait[worst]), name+"-max-gsched-ms")
	b.ReportMetric(ms(nonrq), name+"-max-nonrq-ms")
	sorted := slices.Clone(c.lat)
	slices.Sort(sorted)
	for _, p := range []struct {
		q    float64
		name string
	}{{0.5, "p50"}, {0.99, "p99"}, {1, "max"}} {
		b.ReportMetric(ms(sorted[min(len(sorted)-1, int(p.q*float64(len(sorted))))]), name+"-"+p.name+"-ms")
	}
	if c.cpu > 0 {
		b.ReportMetric(ms(c.cpu)/float64(len(c.lat)), name+"-cpu-ms/step")
	}
	b.ReportMetric(float64(len(c.lat)), name+"-pulls")
}

// schedLatency reads the Go scheduler's histogram of the time goroutines
// spent runnable before running (runtime/metrics /sched/latencies).
type schedLatency struct {
	s    []metrics.Sample
	prev []uint64
}

func newSchedLatency() *schedLatency {
	return &schedLatency{s: []metrics.Sample{{Name: "/sched/latencies:seconds"}}}
}

// since is the upper bound of the highest bucket that gained a count
// since the last call (0: none, or the metric is missing).
func (l *schedLatency) since() time.Duration {
	metrics.Read(l.s)
	if l.s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := l.s[0].Value.Float64Histogram()
	var most time.Duration
	for i, n := range h.Counts {
		if i < len(l.prev) && n > l.prev[i] {
			most = time.Duration(min(h.Buckets[i+1], 1e3) * 1e9)
		}
	}
	l.prev = append(l.prev[:0], h.Counts...)
	return most
}
