package exec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
)

// Where a (re)started pserver starts, from the trainers' positions.
func TestPlanStart(t *testing.T) {
	L := position{Sent: learning, Need: learning}
	at := func(sent, need int64) position { return position{Sent: sent, Need: need} }
	cases := []struct {
		name    string
		pos     []position
		first   int64
		async   bool
		start   int64
		publish []int64
		resume  []int64
		behind  bool
		err     string
	}{
		{name: "fresh job, trainers learn", pos: []position{L, L}, first: 0, start: 0, publish: []int64{0, 0}, resume: []int64{0, 0}},
		{name: "fresh job, start step 0", pos: []position{{Sent: -1, Need: 0}, {Sent: -1, Need: 0}}, first: 0, start: 0, publish: []int64{0, 0}, resume: []int64{0, 0}},
		{name: "whole-job rerun, --start-step", pos: []position{at(99, 100), at(99, 100)}, first: 100, start: 100, publish: []int64{100, 100}, resume: []int64{100, 100}},
		{name: "whole-job rerun, trainers learn", pos: []position{L, L}, first: 100, start: 100, publish: []int64{100, 100}, resume: []int64{100, 100}},
		// trainer 0 sent every gradient of 130 (it has the parameters of
		// 130), trainer 1 waits for them: start at 130; trainer 0 re-sends.
		{name: "restart, one trainer ahead", pos: []position{at(130, 131), at(129, 130)}, first: 100, start: 130, publish: []int64{-1, 130}, resume: []int64{130, 130}, behind: true},
		// both computing step 130 (parameters received, nothing sent yet)
		{name: "restart, both computing", pos: []position{at(129, 131), at(129, 131)}, first: 100, start: 130, publish: []int64{-1, -1}, resume: []int64{130, 130}, behind: true},
		{name: "restart without checkpoint", pos: []position{at(40, 41), at(40, 41)}, first: 0, start: 41, publish: []int64{41, 41}, resume: []int64{41, 41}, behind: true},
		{name: "restart, a trainer learns", pos: []position{at(130, 131), L}, first: 100, start: 131, publish: []int64{131, 131}, resume: []int64{131, 131}, behind: true},
		{name: "trainers behind the checkpoint", pos: []position{at(49, 50), at(49, 50)}, first: 100, start: 100, publish: []int64{100, 100}, resume: []int64{100, 100}, err: "trainer-0 is at step 50"},
		{name: "trainers two steps apart", pos: []position{at(131, 132), at(129, 130)}, first: 100, start: 130, publish: []int64{-1, 130}, resume: []int64{130, 130}, behind: true, err: "trainer-0 is at step 132"},
		{name: "async restart", pos: []position{at(500, 501), at(300, 300), L}, first: 700, async: true, start: 700, publish: []int64{501, 300, 700}, resume: []int64{501, 300, 700}},
		{name: "async restart past the checkpoint", pos: []position{at(800, 801), at(300, 301)}, first: 700, async: true, start: 801, publish: []int64{801, 301}, resume: []int64{801, 301}, behind: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := planStart(c.pos, c.first, c.async)
			if p.start != c.start || fmt.Sprint(p.publish) != fmt.Sprint(c.publish) || fmt.Sprint(p.resume) != fmt.Sprint(c.resume) || p.behind != c.behind {
				t.Errorf("start %d publish %v resume %v behind %v, want %d %v %v %v", p.start, p.publish, p.resume, p.behind, c.start, c.publish, c.resume, c.behind)
			}
			switch {
			case c.err == "" && p.err != nil:
				t.Errorf("error %v", p.err)
			case c.err != "" && (p.err == nil || !strings.Contains(p.err.Error(), c.err)):
				t.Errorf("error %v, want one containing %q", p.err, c.err)
			}
		})
	}
}

// A plan may not name a transfer like a control message.
func TestReservedTransferName(t *testing.T) {
	g, err := dsl.Load(filepath.Join("..", "examples", "digits-mlp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := partition.Split(g, partition.Options{Trainers: 1, PServers: 1, Mode: partition.Sync})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range plan.PServers[0].Ops {
		if op.Type == "accumulate" {
			op.Attrs["var"] = PositionVar
			break
		}
	}
	j := &Job{Trainer: plan.Trainer, PServers: plan.PServers, Trainers: 1}
	if _, err := j.Specs(transport.PServer(0), 1); err == nil || !strings.Contains(err.Error(), "reserves") {
		t.Fatalf("specs of a plan using %q: %v", PositionVar, err)
	}
	specs, err := (&Job{Trainer: plan.Trainer, PServers: plan.PServers, Trainers: 1}).Specs(transport.Trainer(0), 8)
	if err != nil || specs[len(specs)-1] != resumeSpec {
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
	sums     []*Summary
	saved    []string
	killedAt int64 // the newest checkpoint of pserver-1 when it was stopped
	second   *ServeSummary
	manifest Manifest // pserver-1's checkpoints at the end
	log      string   // the restarted pserver's log
}

// runPServerRestart runs a 2x2 digits job over the in-memory transport
// with checkpointing pservers; pserver-1 is stopped once it saved the
// checkpoint of step 100 (its endpoint closed, as a killed process's
// connections close) and started again as a new incarnation from the
// same checkpoint directory.
func runPServerRestart(t *testing.T, async bool, steps int) restartResult {
	t.Helper()
	g, err := dsl.Load(filepath.Join("..", "examples", "digits-mlp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
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
		s, err := j.Specs(id, 0)
		if err != nil {
			t.Fatal(err)
		}
		specs[id] = s
		hub.Endpoint(id).Accept(s...)
	}
	ckDir := filepath.Join(dir, "ck")
	serveOpt := func(i int, log zerolog.Logger) ServeOptions {
		return ServeOptions{Log: log, ResumeStep: -1, TrainerTimeout: 20 * time.Second,
			Checkpoint: &Checkpointer{Dir: ckDir, Every: 50, Node: string(pservers[i]), Model: j.PServers[i].Name}}
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
	run("pserver-0", func() error {
		_, err := j.RunPServer(ctx, 0, hub.Endpoint(pservers[0]), serveOpt(0, zerolog.Nop()))
		return err
	})
	// pserver-1, first incarnation: stopped after its checkpoint of step 100.
	checkpointed := make(chan struct{})
	var once sync.Once
	first := &syncLog{on: func(m map[string]any) {
		if s, _ := m["step"].(float64); m["message"] == "checkpoint saved" && s >= 100 {
			once.Do(func() { close(checkpointed) })
		}
	}}
	ctx1, stop1 := context.WithCancel(ctx)
	defer stop1()
	stopped := make(chan error, 1)
	go func() {
		_, err := j.RunPServer(ctx1, 1, hub.Endpoint(pservers[1]), serveOpt(1, zerolog.New(first)))
		stopped <- err
	}()
	res := restartResult{sums: make([]*Summary, 2)}
	for i := range trainers {
		res.saved = append(res.saved, filepath.Join(dir, fmt.Sprintf("trainer-%d.safetensors", i)))
	}
	for i := range trainers {
		run(string(trainers[i]), func() error {
			s, err := j.RunTrainer(ctx, i, hub.Endpoint(trainers[i]), RunOptions{Steps: steps, Save: res.saved[i],
				Log: zerolog.Nop(), LogEvery: steps, PServerTimeout: 20 * time.Second})
			res.sums[i] = s
			return err
		})
	}
	second := &syncLog{}
	run("pserver-1 (restarted)", func() error {
		select {
		case <-checkpointed:
		case <-ctx.Done():
			return nil
		case <-time.After(60 * time.Second):
			return fmt.Errorf("no checkpoint of step 100 within 60 s:\n%s", first.String())
		}
		stop1()
		if err := <-stopped; !errors.Is(err, context.Canceled) {
			return fmt.Errorf("the first incarnation ended with %v, want it stopped", err)
		}
		m, _, err := (&Checkpointer{Dir: ckDir, Node: string(pservers[1])}).Manifest()
		if err != nil {
			return err
		}
		res.killedAt = m.Steps[len(m.Steps)-1]
		hub.Endpoint(pservers[1]).Close() // its peers see the connection go
		ep := hub.Restart(pservers[1], specs[pservers[1]]...)
		s, err := j.RunPServer(ctx, 1, ep, serveOpt(1, zerolog.New(second)))
		res.second = s
		return err
	})
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		cancel()
		t.Fatalf("the job did not finish within 120 s; the restarted pserver's log:\n%s", second.String())
	}
	close(errs)
	for err := range errs {
		t.Errorf("%v\nthe restarted pserver's log:\n%s", err, second.String())
	}
	rejected.Range(func(k, _ any) bool { t.Errorf("rejected: %v", k); return true })
	if t.Failed() {
		t.FailNow()
	}
	m, _, err := (&Checkpointer{Dir: ckDir, Node: string(pservers[1])}).Manifest()
	if err != nil {
		t.Fatal(err)
	}
	res.manifest, res.log = m, second.String()
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
	a, _, err := LoadSafetensors(r.saved[0])
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := LoadSafetensors(r.saved[1])
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
	for _, p := range []position{{Sent: learning, Need: learning}, {Sent: -1, Need: 0}, {Sent: 129, Need: 131, Rejoin: true}} {
		b := p.bytes()
		if len(b) != positionSpec.Bytes || positionOf(b) != p {
			t.Errorf("%+v: %d bytes, back %+v", p, len(b), positionOf(b))
		}
	}
}
