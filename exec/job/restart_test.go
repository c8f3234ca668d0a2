package job

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/pserver"
	"github.com/psgraph/psgraph/exec/rejoin"
	"github.com/psgraph/psgraph/exec/trainer"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
)

// A plan may not name a transfer like a control message.
func TestReservedTransferName(t *testing.T) {
	g, err := dsl.Load(filepath.Join("..", "..", "examples", "digits-mlp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := partition.Split(g, partition.Options{Trainers: 1, PServers: 1, Mode: partition.Sync})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range plan.PServers[0].Ops {
		if op.Type == "accumulate" {
			op.Attrs["var"] = comm.PositionVar
			break
		}
	}
	j := &Job{Trainer: plan.Trainer, PServers: plan.PServers, Trainers: 1}
	if _, err := j.Specs(transport.PServer(0), 1); err == nil || !strings.Contains(err.Error(), "reserves") {
		t.Fatalf("specs of a plan using %q: %v", comm.PositionVar, err)
	}
	specs, err := (&Job{Trainer: plan.Trainer, PServers: plan.PServers, Trainers: 1}).Specs(transport.Trainer(0), 8)
	if err != nil || specs[len(specs)-1] != comm.ResumeSpec {
		t.Fatalf("a trainer accepts %v (%v), want the resume transfer last", specs, err)
	}
}

// syncLog is a zerolog destination tests can read while nodes write.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
	// on is called with each line (under no lock).
	on func(line map[string]any)
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
	if l.on != nil {
		var m map[string]any
		if json.Unmarshal(p, &m) == nil {
			l.on(m)
		}
	}
	return len(p), nil
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// restartResult is what a job with a pserver restart left behind.
type restartResult struct {
	sums     []*trainer.Summary
	saved    []string
	shards   []string // each pserver's --save of its table shards (table models)
	killedAt int64    // the newest checkpoint of pserver-1 when it was stopped
	second   *pserver.ServeSummary
	manifest modelfile.Manifest // the victim's checkpoints at the end
	ckDir    string
	log      string   // the restarted pserver's log
	trainers []string // the trainers' logs
}

// restartCase is a 2x2 job whose pserver-1 restarts mid-run.
type restartCase struct {
	g            *dsl.Graph
	async        bool
	steps, batch int
	every        int64 // checkpoint interval
	killAfter    int64 // the victim is stopped once it saved this step's checkpoint
	victim       int   // the pserver that restarts
	initFrom     string
	// table and dense name the table transfer (default "emb") and the
	// dense parameter on pserver-0 (default "W") that the staged cases
	// watch and hold.
	table, dense string

	// Optional hooks that put the job into a chosen state for the restart:
	// wrap wraps trainer i's endpoint; ready blocks, once the victim saved
	// its checkpoint, until the job is where the victim should die; killed
	// runs once the victim's endpoint closed, before its new incarnation
	// starts; resumed once the new incarnation heard every trainer.
	wrap func(i int, ep transport.Endpoint) transport.Endpoint
	// wrapVictim wraps the victim's first incarnation's endpoint.
	wrapVictim func(ep transport.Endpoint) transport.Endpoint
	ready      func(ctx context.Context) error
	killed     func()
	resumed    func()
}

// hookedEP is an endpoint whose sends and receives a test watches or
// holds: before* may block (until ctx ends), after* only observe.
type hookedEP struct {
	transport.Endpoint
	beforeSend func(ctx context.Context, to transport.NodeID, step int64, v string) error
	afterSend  func(to transport.NodeID, step int64, v string)
	beforeRecv func(ctx context.Context, src transport.NodeID, step int64, v string) error
	afterRecv  func(src transport.NodeID, step int64, v string)
}

func (e *hookedEP) Send(ctx context.Context, to transport.NodeID, step int64, v string, dt transport.DType, payload []byte) error {
	if e.beforeSend != nil {
		if err := e.beforeSend(ctx, to, step, v); err != nil {
			return err
		}
	}
	if err := e.Endpoint.Send(ctx, to, step, v, dt, payload); err != nil {
		return err
	}
	if e.afterSend != nil {
		e.afterSend(to, step, v)
	}
	return nil
}

func (e *hookedEP) recv(ctx context.Context, src transport.NodeID, step int64, v string, f func() error) error {
	if e.beforeRecv != nil {
		if err := e.beforeRecv(ctx, src, step, v); err != nil {
			return err
		}
	}
	if err := f(); err != nil {
		return err
	}
	if e.afterRecv != nil {
		e.afterRecv(src, step, v)
	}
	return nil
}

func (e *hookedEP) Recv(ctx context.Context, src transport.NodeID, step int64, v string, dst []byte) error {
	return e.recv(ctx, src, step, v, func() error { return e.Endpoint.Recv(ctx, src, step, v, dst) })
}

func (e *hookedEP) RecvSink(ctx context.Context, src transport.NodeID, step int64, v string, sink transport.Sink) error {
	return e.recv(ctx, src, step, v, func() error { return e.Endpoint.RecvSink(ctx, src, step, v, sink) })
}

// runPServerRestart runs a 2x2 digits job over the in-memory transport
// with checkpointing pservers; pserver-1 is stopped once it saved the
// checkpoint of step 100 (its endpoint closed, as a killed process's
// connections close) and started again as a new incarnation from the
// same checkpoint directory.
func runPServerRestart(t *testing.T, async bool, steps int) restartResult {
	t.Helper()
	g, err := dsl.Load(filepath.Join("..", "..", "examples", "digits-mlp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return runRestartCase(t, restartCase{g: g, async: async, steps: steps, every: 50, killAfter: 100, victim: 1})
}

func runRestartCase(t *testing.T, rc restartCase) restartResult {
	t.Helper()
	g, async, steps := rc.g, rc.async, rc.steps
	mode := partition.Sync
	if async {
		mode = partition.Async
	}
	plan, err := partition.Split(g, partition.Options{Trainers: 2, PServers: 2, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	j := &Job{Trainer: plan.Trainer, PServers: plan.PServers, Trainers: 2, Async: async, Params: plan.Info.ServedParams()}
	trainers, pservers := j.TrainerIDs(), j.PServerIDs()
	var rejected sync.Map
	hub := transport.NewHub(func(err error) {
		// Expected: messages to the stopped pserver's closed endpoint,
		// restarts, and duplicates dropped as stale. Anything else (an
		// unknown transfer, a wrong size) is a bug.
		if errors.Is(err, transport.ErrClosed) || errors.Is(err, transport.ErrPeerRestarted) || strings.Contains(err.Error(), "stale") {
			return
		}
		rejected.Store(err.Error(), true)
	}, append(trainers, pservers...)...)
	specs := map[transport.NodeID][]transport.Spec{}
	for _, id := range append(trainers, pservers...) {
		s, err := j.Specs(id, rc.batch)
		if err != nil {
			t.Fatal(err)
		}
		specs[id] = s
		hub.Endpoint(id).Accept(s...)
	}
	ckDir := filepath.Join(dir, "ck")
	res := restartResult{sums: make([]*trainer.Summary, 2)}
	if plan.Info.HasTables() {
		for i := range pservers {
			res.shards = append(res.shards, filepath.Join(dir, fmt.Sprintf("pserver-%d.safetensors", i)))
		}
	}
	serveOpt := func(i int, log zerolog.Logger) pserver.ServeOptions {
		o := pserver.ServeOptions{Log: log, ResumeStep: -1, TrainerTimeout: 20 * time.Second, InitFrom: rc.initFrom,
			Checkpoint: &modelfile.Checkpointer{Dir: ckDir, Every: int(rc.every), Node: pservers[i].String(), Model: j.PServers[i].Name}}
		if res.shards != nil {
			o.Save = res.shards[i]
		}
		return o
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	run := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}
	v, other := rc.victim, 1-rc.victim
	run(pservers[other].String(), func() error {
		_, err := j.RunPServer(ctx, other, hub.Endpoint(pservers[other]), serveOpt(other, zerolog.Nop()))
		return err
	})
	// The victim's first incarnation: stopped after its checkpoint of killAfter.
	// Without a state to wait for, it is stopped from the log line itself:
	// a checkpoint of a dynamic table is saved beside the serving loop, and
	// a test goroutine woken later could find the job already finished.
	checkpointed := make(chan struct{})
	var once sync.Once
	ctx1, stop1 := context.WithCancel(ctx)
	defer stop1()
	first := &syncLog{on: func(m map[string]any) {
		if s, _ := m["step"].(float64); m["message"] == "checkpoint saved" && int64(s) >= rc.killAfter {
			once.Do(func() {
				if rc.ready == nil {
					stop1()
				}
				close(checkpointed)
			})
		}
	}}
	stopped := make(chan error, 1)
	go func() {
		var ep transport.Endpoint = hub.Endpoint(pservers[v])
		if rc.wrapVictim != nil {
			ep = rc.wrapVictim(ep)
		}
		_, err := j.RunPServer(ctx1, v, ep, serveOpt(v, zerolog.New(first)))
		stopped <- err
	}()
	for i := range trainers {
		res.saved = append(res.saved, filepath.Join(dir, fmt.Sprintf("trainer-%d.safetensors", i)))
	}
	tlogs := make([]*syncLog, len(trainers))
	for i := range trainers {
		tlogs[i] = &syncLog{}
		var ep transport.Endpoint = hub.Endpoint(trainers[i])
		if rc.wrap != nil {
			ep = rc.wrap(i, ep)
		}
		run(trainers[i].String(), func() error {
			s, err := j.RunTrainer(ctx, i, ep, trainer.RunOptions{Steps: steps, Batch: rc.batch, Save: res.saved[i],
				Log: zerolog.New(tlogs[i]), LogEvery: steps, PServerTimeout: 20 * time.Second})
			res.sums[i] = s
			return err
		})
	}
	var resumedOnce sync.Once
	second := &syncLog{on: func(m map[string]any) {
		if msg, _ := m["message"].(string); rc.resumed != nil && strings.Contains(msg, "restarted into a running job") {
			resumedOnce.Do(rc.resumed)
		}
	}}
	run(pservers[v].String()+" (restarted)", func() error {
		select {
		case <-checkpointed:
		case <-ctx.Done():
			return nil
		case <-time.After(60 * time.Second):
			return fmt.Errorf("no checkpoint of step %d within 60 s:\n%s", rc.killAfter, first.String())
		}
		if rc.ready != nil {
			if err := rc.ready(ctx); err != nil {
				return fmt.Errorf("waiting for the state to stop %s in: %w", pservers[v], err)
			}
		}
		stop1()
		if err := <-stopped; !errors.Is(err, context.Canceled) {
			return fmt.Errorf("the first incarnation ended with %v, want it stopped", err)
		}
		m, _, err := (&modelfile.Checkpointer{Dir: ckDir, Node: pservers[v].String()}).Manifest()
		if err != nil {
			return err
		}
		res.killedAt = m.Steps[len(m.Steps)-1]
		hub.Endpoint(pservers[v]).Close() // its peers see the connection go
		if rc.killed != nil {
			rc.killed()
		}
		ep := hub.Restart(pservers[v], specs[pservers[v]]...)
		s, err := j.RunPServer(ctx, v, ep, serveOpt(v, zerolog.New(second)))
		res.second = s
		return err
	})
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		cancel()
		var ended []string
		for len(errs) > 0 {
			ended = append(ended, (<-errs).Error())
		}
		first := first.String()
		first = first[max(0, len(first)-3000):]
		var tl strings.Builder
		for i, l := range tlogs {
			fmt.Fprintf(&tl, "trainer-%d:\n%s\n", i, l.String())
		}
		t.Fatalf("the job did not finish within 60 s; errors so far: %q\nthe first incarnation's log ends:\n%s\nthe restarted pserver's log:\n%s\nthe trainers' logs:\n%s\nthe goroutines then:\n%s", ended, first, second.String(), tl.String(), buf)
	}
	close(errs)
	for err := range errs {
		t.Errorf("%v\nthe restarted pserver's log:\n%s", err, second.String())
	}
	rejected.Range(func(k, _ any) bool { t.Errorf("rejected: %v", k); return true })
	if t.Failed() {
		t.FailNow()
	}
	m, _, err := (&modelfile.Checkpointer{Dir: ckDir, Node: pservers[v].String()}).Manifest()
	if err != nil {
		t.Fatal(err)
	}
	res.manifest, res.log, res.ckDir = m, second.String(), ckDir
	for _, l := range tlogs {
		res.trainers = append(res.trainers, l.String())
	}
	return res
}

// Sync: pserver-1 stopped mid-run and started again from its checkpoint;
// the running trainers reconnect, tell it their positions, and the job
// finishes with normal accuracy and one model on both trainers.
func TestPServerRestartInmem(t *testing.T) {
	r := runPServerRestart(t, false, 600)
	t.Logf("accuracy %.3f, %.3f", r.sums[0].Metrics["acc"], r.sums[1].Metrics["acc"])
	for i, s := range r.sums {
		if acc := s.Metrics["acc"]; acc < 0.95 {
			t.Errorf("trainer-%d: digits accuracy %.3f after a pserver restart, want >= 0.95", i, acc)
		}
	}
	a, _, err := modelfile.LoadSafetensors(r.saved[0])
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := modelfile.LoadSafetensors(r.saved[1])
	if err != nil {
		t.Fatal(err)
	}
	for name, x := range a {
		if d := relDiff(x.F, b[name].F); d != 0 {
			t.Errorf("%s differs between the trainers (relative %.2g)", name, d)
		}
	}
	t.Logf("stopped with checkpoint %d; restarted at step %d", r.killedAt, r.second.First)
	if r.second.First < r.killedAt {
		t.Errorf("the restarted pserver started at step %d, before its checkpoint %d", r.second.First, r.killedAt)
	}
	if !strings.Contains(r.log, "restarted into a running job") || r.second.First > r.killedAt && !strings.Contains(r.log, fmt.Sprintf("updates of steps %d..%d", r.killedAt, r.second.First-1)) {
		t.Errorf("the restarted pserver did not say it joined a running job at step %d, losing the updates since %d:\n%s", r.second.First, r.killedAt, r.log)
	}
	if newest := r.manifest.Steps[len(r.manifest.Steps)-1]; newest <= r.second.First {
		t.Errorf("checkpoints after the restart: %v, want one past step %d", r.manifest.Steps, r.second.First)
	}
}

// Async: the same restart does not hang, rejects nothing unexpected, and
// the job still learns.
func TestPServerRestartAsyncInmem(t *testing.T) {
	r := runPServerRestart(t, true, 600)
	t.Logf("accuracy %.3f, %.3f; checkpoint %d, restarted at %d", r.sums[0].Metrics["acc"], r.sums[1].Metrics["acc"], r.killedAt, r.second.First)
	for i, s := range r.sums {
		if acc := s.Metrics["acc"]; acc < 0.9 {
			t.Errorf("trainer-%d: async digits accuracy %.3f after a pserver restart, want >= 0.9", i, acc)
		}
	}
	if r.second.First < r.killedAt {
		t.Errorf("the restarted pserver started at step %d, before its checkpoint %d", r.second.First, r.killedAt)
	}
	if !strings.Contains(r.log, "restarted into a running job from checkpoint") {
		t.Errorf("the restarted pserver did not say it joined a running job:\n%s", r.log)
	}
}

func TestPositionBytes(t *testing.T) {
	for _, p := range []rejoin.Position{{Sent: rejoin.Learning, Need: rejoin.Learning}, {Sent: -1, Need: 0}, {Sent: 129, Need: 131, Rejoin: true, Steps: 400, Batch: 32}, {Sent: -1, Need: 0, Steps: 1 << 40, Batch: 7}} {
		b := p.Bytes()
		if len(b) != comm.PositionSpec.Bytes || rejoin.DecodePosition(b) != p {
			t.Errorf("%+v: %d bytes, back %+v", p, len(b), rejoin.DecodePosition(b))
		}
	}
}

// signal is a condition a test waits for, fired once.
type signal struct {
	once sync.Once
	c    chan struct{}
}

func newSignal() *signal { return &signal{c: make(chan struct{})} }
func (s *signal) fire()  { s.once.Do(func() { close(s.c) }) }
func (s *signal) wait(ctx context.Context) error {
	select {
	case <-s.c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// resentBy is how many messages each trainer's log says it re-sent to a
// restarted pserver.
func resentBy(t *testing.T, logs []string) []int {
	t.Helper()
	out := make([]int, len(logs))
	for i, l := range logs {
		for _, line := range strings.Split(l, "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["message"] == "the restarted pserver resumes; carrying on" {
				n, _ := m["resent"].(float64)
				out[i] += int(n)
			}
		}
	}
	return out
}

// A pserver holding lookup-table shards stopped mid-run and started again
// from its checkpoint (which holds its shards and their optimizer state):
// the trainers, blocked on its rows or sending it row gradients, wait for
// it, tell it their positions, re-send what the restart lost (their
// requests and row gradients too), and the job carries on.
//
// Two restarts are staged so that the restarted pserver starts at the
// step of its checkpoint, every lost message is re-sent and no update is
// lost: the job then ends bitwise where the undisturbed job ends.
//
//   - one trainer ahead: pserver-1 (a shard only) dies at step 100 with
//     trainer-0's row gradient of 100 and request of 101 in it, while
//     trainer-1, which has its rows of 100, is held before its gradient.
//     trainer-0 re-sends that gradient, an empty request for 100 (the
//     pserver serves every trainer at every step; trainer-0 has its rows)
//     and its request of 101; trainer-1 an empty request for 100.
//   - a request lost: pserver-0 (W and a shard) dies at step 100 having
//     answered trainer-0, while trainer-1's request of 100 is held until
//     the old process is gone (lost with it). trainer-0 re-sends its
//     gradients of 100 (W and the rows), an empty request for 100 and its
//     request of 101; trainer-1 its request of 100.
//
// Then unstaged restarts, wherever they fall, sync and async: the job
// ends with the loss of an undisturbed one.
func TestPServerRestartTableInmem(t *testing.T) {
	const init = "../../testdata/sparse/init.safetensors"
	g := load(t, "../../testdata/sparse/emb-adagrad.yaml")
	// The undisturbed job's model.
	plain := runTableJob(t, g, 2, 2, false, trainer.RunOptions{Steps: 400, Batch: 8, InitFrom: init, Log: zerolog.Nop()})
	plan, err := partition.Split(g, partition.Options{Trainers: 2, PServers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if w := plan.Info.Params[0]; w.Name != "W" || w.Blocks[0].PServer != 0 {
		t.Fatalf("the staged restarts expect W on pserver-0, the plan has %+v", w)
	}
	for _, c := range []struct {
		name   string
		victim int
		async  bool
		stage  func(*restartCase) []int
	}{
		{"one trainer ahead", 1, false, stageOneAhead},
		{"a request lost", 0, false, stageRequestLost},
		{"unstaged", 1, false, nil},
		{"unstaged", 0, false, nil},
		{"unstaged", 1, true, nil},
		{"unstaged", 0, true, nil},
	} {
		t.Run(fmt.Sprintf("%s/pserver-%d/async=%v", c.name, c.victim, c.async), func(t *testing.T) {
			rc := restartCase{g: g, async: c.async, steps: 400, batch: 8, every: 50, killAfter: 100, victim: c.victim, initFrom: init}
			var wantResent []int
			if c.stage != nil {
				wantResent = c.stage(&rc)
			}
			r := runRestartCase(t, rc)
			t.Logf("stopped with checkpoint %d; restarted at step %d; the trainers re-sent %v messages", r.killedAt, r.second.First, resentBy(t, r.trainers))
			if r.second.First < r.killedAt {
				t.Errorf("the restarted pserver started at step %d, before its checkpoint %d", r.second.First, r.killedAt)
			}
			if !strings.Contains(r.log, "restarted into a running job") {
				t.Errorf("the restarted pserver did not say it joined a running job:\n%s", r.log)
			}
			// The checkpoint it restored holds its shard and the shard's state.
			ck := &modelfile.Checkpointer{Dir: r.ckDir, Node: transport.PServer(c.victim).String()}
			saved, err := ck.Load(r.manifest.Steps[len(r.manifest.Steps)-1])
			if err != nil {
				t.Fatal(err)
			}
			shard := fmt.Sprintf("emb.s%d", c.victim)
			if saved[shard] == nil || saved[shard+"@sum"] == nil {
				t.Errorf("pserver-%d's checkpoint holds %v, want %s and %s@sum", c.victim, keys(saved), shard, shard)
			}
			if newest := r.manifest.Steps[len(r.manifest.Steps)-1]; newest <= r.second.First {
				t.Errorf("checkpoints after the restart: %v, want one past step %d", r.manifest.Steps, r.second.First)
			}
			if !c.async {
				sameDense(t, r.saved[0], r.saved[1]) // one model on both trainers
			}
			// Trainer 0's file is the whole model, its table pulled from
			// the pservers (one of them restarted): what mergeShards makes
			// of the pservers' own shard files, byte for byte.
			merged := filepath.Join(t.TempDir(), "model.safetensors")
			if err := mergeShards(merged, r.saved[0], plan.PServers, r.shards); err != nil {
				t.Fatal(err)
			}
			sameBytes(t, merged, r.saved[0])
			if c.stage != nil {
				if r.second.First != 100 || fmt.Sprint(resentBy(t, r.trainers)) != fmt.Sprint(wantResent) {
					t.Errorf("restarted at %d with the trainers re-sending %v, want 100 and %v", r.second.First, resentBy(t, r.trainers), wantResent)
				}
				compareParams(t, plain, merged, 0) // nothing lost
				return
			}
			lp, lr := evalModel(t, g, plain), evalModel(t, g, merged)
			t.Logf("loss %.4f undisturbed, %.4f with the restart", lp, lr)
			if lr > 1.1*lp {
				t.Errorf("loss %.4f after the restart, %.4f undisturbed", lr, lp)
			}
		})
	}
}

// stageOneAhead stages the restart "one trainer ahead" of a job whose
// table is emb and W is on pserver-0 (TestPServerRestartTableInmem says
// how); it returns the messages each trainer re-sends.
func stageOneAhead(rc *restartCase) (resent []int) {
	table, dense := cmp.Or(rc.table, "emb"), cmp.Or(rc.dense, "W")
	ids, rows := ops.TableIDs(table), ops.TableRows(table)
	t0Asked, t1HasRows, release := newSignal(), newSignal(), newSignal()
	rc.wrap = func(i int, ep transport.Endpoint) transport.Endpoint {
		h := &hookedEP{Endpoint: ep}
		if i == 0 {
			h.afterSend = func(to transport.NodeID, step int64, v string) {
				if to == transport.PServer(1) && v == ids && step == 101 {
					t0Asked.fire()
				}
			}
		} else {
			h.afterRecv = func(src transport.NodeID, step int64, v string) {
				if src == transport.PServer(1) && v == rows && step == 100 {
					t1HasRows.fire()
				}
			}
			h.beforeRecv = func(ctx context.Context, src transport.NodeID, step int64, v string) error {
				if src == transport.PServer(0) && v == dense && step == 100 {
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
		return t1HasRows.wait(ctx)
	}
	rc.resumed = release.fire
	return []int{3, 1}
}

// stageRequestLost stages the restart "a request lost" (see
// TestPServerRestartTableInmem).
func stageRequestLost(rc *restartCase) (resent []int) {
	ids := ops.TableIDs("emb")
	t0Asked, t1Held, release := newSignal(), newSignal(), newSignal()
	rc.wrap = func(i int, ep transport.Endpoint) transport.Endpoint {
		h := &hookedEP{Endpoint: ep}
		if i == 0 {
			h.afterSend = func(to transport.NodeID, step int64, v string) {
				if to == transport.PServer(0) && v == ids && step == 101 {
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
	return []int{4, 1}
}
func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
