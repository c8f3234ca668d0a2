package job

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/pserver"
	"github.com/psgraph/psgraph/exec/rejoin"
	"github.com/psgraph/psgraph/exec/trainer"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
)

// The messages of a sharded table carry lists whose length varies, so
// every one is checked where it arrives. These tests play a trainer (or a
// pserver) that sends what no psgraph node of the job would, over the
// in-memory transport and over TCP on loopback, and check that the node
// fails with an error naming the peer and, on a pserver, that the shard
// and its optimizer state are bitwise unchanged.

// tableJob splits testdata/sparse/emb-adagrad.yaml (a [40, 4] table and a
// dense W) for n trainers and m pservers.
func tableJob(t *testing.T, n, m int, async bool) *Job {
	t.Helper()
	g := load(t, "../../testdata/sparse/emb-adagrad.yaml")
	mode := partition.Sync
	if async {
		mode = partition.Async
	}
	plan, err := partition.Split(g, partition.Options{Trainers: n, PServers: m, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	return &Job{Trainer: plan.Trainer, PServers: plan.PServers, Trainers: n, Async: async, Params: plan.Info.ServedParams()}
}

// rejections collects what the transports reported as rejected.
type rejections struct {
	mu   sync.Mutex
	errs []string
}

func (r *rejections) add(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err.Error())
	r.mu.Unlock()
}

func (r *rejections) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errs, "; ")
}

// jobEndpoints connects every node of j over transport kind ("inmem" or
// "tcp", loopback), each accepting its specs at batch.
func jobEndpoints(t *testing.T, kind string, j *Job, batch int, rej *rejections) map[transport.NodeID]transport.Endpoint {
	t.Helper()
	trainers, pservers := j.TrainerIDs(), j.PServerIDs()
	specs := map[transport.NodeID][]transport.Spec{}
	for _, id := range append(trainers, pservers...) {
		s, err := j.Specs(id, batch)
		if err != nil {
			t.Fatal(err)
		}
		specs[id] = s
	}
	eps := map[transport.NodeID]transport.Endpoint{}
	t.Cleanup(func() {
		for _, e := range eps {
			e.Close()
		}
	})
	if kind == "inmem" {
		hub := transport.NewHub(rej.add, append(trainers, pservers...)...)
		for id, s := range specs {
			ep := hub.Endpoint(id)
			ep.Accept(s...)
			eps[id] = ep
		}
		return eps
	}
	addrs := map[transport.NodeID]string{}
	for _, ps := range pservers {
		cfg := transport.Config{Self: ps, Listen: "127.0.0.1:0", Peers: map[transport.NodeID]string{}, JobHash: "hostile", Accept: specs[ps], OnError: rej.add}
		for _, tr := range trainers {
			cfg.Peers[tr] = ""
		}
		ep, err := transport.Listen(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		eps[ps], addrs[ps] = ep, ep.Addr().String()
	}
	for _, tr := range trainers {
		ep, err := transport.Dial(context.Background(), transport.Config{Self: tr, Peers: addrs, JobHash: "hostile", Accept: specs[tr], OnError: rej.add, ConnectTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		eps[tr] = ep
	}
	return eps
}

// tablePart compiles the part of pserver i's graph that serves and updates
// its table shard, initialized from the test data's init file, as Serve
// runs it.
func tablePart(t *testing.T, j *Job, i int, ep transport.Endpoint) (*program.Program, *program.Runtime) {
	t.Helper()
	for _, part := range program.Components(j.PServers[i]) {
		if len(dsl.TableShards(part)) == 0 {
			continue
		}
		prog, err := program.Compile(part, program.CompileOptions{Sequential: true, Node: kernels.Node{Role: ir.PServerRole, Trainers: j.Trainers, Async: j.Async}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(prog.Close)
		if err := program.Init(prog, program.InitOptions{From: "../../testdata/sparse/init.safetensors", Partial: true}); err != nil {
			t.Fatal(err)
		}
		ts, err := part.Transfers(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := comm.NewPServer(comm.Config{EP: ep, Trainers: j.Trainers, Async: j.Async, Transfers: ts})
		t.Cleanup(c.Close)
		return prog, &program.Runtime{Ctx: context.Background(), PS: c.Part(nil, 0)}
	}
	t.Fatalf("pserver-%d holds no table shard", i)
	return nil, nil
}

// stateBytes copies the bytes of a program's persistent variables.
func stateBytes(p *program.Program) map[string][]byte {
	out := map[string][]byte{}
	for name, t := range program.PersistentOf(p) {
		out[name] = append([]byte(nil), t.Bytes()...)
	}
	return out
}

func i32s(ids ...int32) []byte {
	b := make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(id))
	}
	return b
}

// rowGrad is a row gradient payload: the local ids, then d values each.
func rowGrad(d int, ids ...int32) []byte {
	b := i32s(ids...)
	for i := range len(ids) * d {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(0.5+float32(i)))
	}
	return b
}

// A pserver given a bad request or row gradient fails naming the trainer
// that sent it and applies nothing: its shard and the shard's optimizer
// state keep every byte. Sync: a bad piece from trainer-1 also keeps
// trainer-0's good one from being applied (every piece is checked before
// any is merged). Async: the same messages, each taken as it comes.
func TestTableHostileTrainerInput(t *testing.T) {
	// pserver-0 of 2 holds rows 0, 2, ..., 38 of the [40, 4] table as its
	// local rows 0..19; a request holds at most 40 ids (160 bytes), a row
	// gradient at most 40 rows (40 * 20 bytes).
	const d, shardRows, maxRows = 4, 20, 40
	ids, grads := ops.TableIDs("emb"), ops.GradName("emb")
	type msg struct {
		from    int
		v       string
		payload []byte
	}
	good := func(from int) []msg {
		return []msg{{from, ids, i32s(0, 19)}, {from, grads, rowGrad(d, 0, 19)}}
	}
	cases := []struct {
		name string
		msgs []msg
		want []string // in the error
	}{
		{"ids beyond the shard", append(good(0), msg{1, ids, i32s(3, shardRows)}), []string{"trainer-1 asked for local row 20 of emb", "holds 20 rows", "nothing was served"}},
		{"negative id", append(good(0), msg{1, ids, i32s(-1)}), []string{"trainer-1 asked for local row -1"}},
		{"ids not whole int32s", append(good(0), msg{1, ids, []byte{1, 0, 0, 0, 2, 0}}), []string{"trainer-1 sent a request for rows of emb of 6 bytes, not whole int32 ids"}},
		{"more ids than the plan allows", append(good(0), msg{1, ids, make([]byte, 4*(maxRows+1))}), []string{"from trainer-1", "164 bytes", "at most 160", "another split"}},
		{"gradient not whole rows", append(good(0), msg{1, ids, i32s(0)}, msg{1, grads, rowGrad(d, 0)[:4+4*d-1]}), []string{"trainer-1 sent a row gradient of emb@GRAD of 19 bytes, not whole rows of width 4", "nothing was applied"}},
		{"gradient for a row beyond the shard", append(good(0), msg{1, ids, i32s(0)}, msg{1, grads, rowGrad(d, 5, shardRows)}), []string{"trainer-1 sent a gradient for local row 20 of emb", "nothing was applied"}},
		{"gradient for a negative row", append(good(0), msg{1, ids, i32s(0)}, msg{1, grads, rowGrad(d, -3)}), []string{"trainer-1 sent a gradient for local row -3"}},
		{"gradient larger than the plan allows", append(good(0), msg{1, ids, i32s(0)}, msg{1, grads, rowGrad(d, make([]int32, maxRows+1)...)}), []string{"from trainer-1", "at most 800", "another split"}},
	}
	for _, kind := range []string{"inmem", "tcp"} {
		for _, async := range []bool{false, true} {
			for _, c := range cases {
				t.Run(fmt.Sprintf("%s/async=%v/%s", kind, async, c.name), func(t *testing.T) {
					j := tableJob(t, 2, 2, async)
					rej := &rejections{}
					eps := jobEndpoints(t, kind, j, 8, rej)
					prog, rt := tablePart(t, j, 0, eps[transport.PServer(0)])
					before := stateBytes(prog)
					ctx := context.Background()
					for _, m := range c.msgs {
						if async && m.from == 0 {
							continue // async: the bad piece alone (a good one would be applied, as it should)
						}
						tr := eps[transport.Trainer(m.from)]
						dt := transport.I32
						if m.v == grads {
							dt = transport.Rows
						}
						if err := tr.Send(ctx, transport.PServer(0), 0, m.v, dt, m.payload); err != nil {
							t.Fatal(err)
						}
						if err := tr.Flush(ctx); err != nil {
							t.Fatal(err)
						}
					}
					stop := hangWatch(t, 30*time.Second, "the pserver's step on bad input")
					err := prog.Run(rt)
					stop()
					if err == nil {
						t.Fatal("the step succeeded")
					}
					t.Log(err)
					for _, w := range c.want {
						if !strings.Contains(err.Error(), w) {
							t.Errorf("error %q does not say %q", err, w)
						}
					}
					after := stateBytes(prog)
					for name, b := range before {
						if !bytes.Equal(b, after[name]) {
							t.Errorf("%s changed: a bad message was applied", name)
						}
					}
					if len(before) != 2 {
						t.Errorf("checked %d persistent tensors, want the shard and its adagrad sum", len(before))
					}
					if strings.Contains(c.name, "plan allows") && !strings.Contains(rej.String(), "trainer-1") {
						t.Errorf("the transport did not report the rejection naming trainer-1: %q", rej)
					}
				})
			}
		}
	}
}

// A trainer whose pserver answers a request with the wrong number of rows,
// or more bytes than any request could need, fails naming that pserver.
func TestTableHostilePServerReply(t *testing.T) {
	const batch = 8 // the trainer fetches at most 24 rows (96 floats) per shard
	cases := []struct {
		name  string
		reply []byte // pserver-1's answer to a request for one row
		want  []string
	}{
		{"two rows for one", make([]byte, 2*16), []string{"pserver-1 answered 32 bytes for 1 rows of emb (16 bytes)", "another plan"}},
		{"no rows for one", nil, []string{"pserver-1 answered 0 bytes for 1 rows of emb"}},
		{"more than any request", make([]byte, 4*96+4), []string{"from pserver-1", "388 bytes", "at most 384", "another split"}},
	}
	for _, kind := range []string{"inmem", "tcp"} {
		for _, c := range cases {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				j := tableJob(t, 1, 2, false)
				rej := &rejections{}
				eps := jobEndpoints(t, kind, j, batch, rej)
				prog, err := program.Compile(j.Trainer, program.CompileOptions{Batch: batch, Node: kernels.Node{Role: ir.TrainerRole}})
				if err != nil {
					t.Fatal(err)
				}
				defer prog.Close()
				// Every id is 1: one row, owned by pserver-1 as its local row 0.
				for i := range prog.Scope["ids"].I {
					prog.Scope["ids"].I[i] = 1
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				prog.OnError = func(error) { cancel() }
				ts, err := j.Trainer.Transfers(j.Trainer.Batch(), nil)
				if err != nil {
					t.Fatal(err)
				}
				c0 := comm.NewTrainer(comm.Config{EP: eps[transport.Trainer(0)], Trainers: 1, Transfers: ts}, j.PServerIDs())
				defer c0.Close()
				rt := &program.Runtime{Ctx: ctx, RV: c0}
				ps0, ps1 := eps[transport.PServer(0)], eps[transport.PServer(1)]
				w := make([]byte, 4*prog.Scope["W"].Numel())
				must := func(err error) {
					t.Helper()
					if err != nil {
						t.Fatal(err)
					}
				}
				must(ps0.Send(ctx, transport.Trainer(0), 0, "W", transport.F32, w))
				must(ps0.Send(ctx, transport.Trainer(0), 0, ops.TableRows("emb"), transport.F32, nil)) // no ids of pserver-0
				must(ps1.Send(ctx, transport.Trainer(0), 0, ops.TableRows("emb"), transport.F32, c.reply))
				must(ps0.Flush(ctx))
				must(ps1.Flush(ctx))
				stop := hangWatch(t, 30*time.Second, "the trainer's step on a bad reply")
				err = prog.Run(rt)
				stop()
				if err == nil {
					t.Fatal("the step succeeded")
				}
				t.Log(err)
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
			})
		}
	}
}

// In a running job, a trainer that sends a pserver ids outside its shard
// stops the job: the pserver exits naming that trainer, tells the others
// why, and they exit with that reason: every node ends, none hangs.
func TestTableHostileTrainerStopsTheJob(t *testing.T) {
	j := tableJob(t, 2, 2, false)
	rej := &rejections{}
	eps := jobEndpoints(t, "inmem", j, 8, rej)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = j.RunPServer(ctx, i, eps[transport.PServer(i)], pserver.ServeOptions{Log: zerolog.Nop(), ResumeStep: -1, TrainerTimeout: 10 * time.Second})
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, errs[2] = j.RunTrainer(ctx, 0, eps[transport.Trainer(0)], trainer.RunOptions{Steps: 20, Batch: 8, Log: zerolog.Nop(), PServerTimeout: 10 * time.Second})
	}()
	// trainer-1: a position like any fresh trainer's, then a request for
	// local row 99 of pserver-0's 20-row shard.
	bad := eps[transport.Trainer(1)]
	for _, p := range j.PServerIDs() {
		if err := bad.Send(ctx, p, comm.CtrlStep, comm.PositionVar, comm.PositionSpec.DType, rejoin.Position{Sent: -1, Need: 0, Steps: 20, Batch: 8}.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	if err := bad.Send(ctx, transport.PServer(0), 0, ops.TableIDs("emb"), transport.I32, i32s(99)); err != nil {
		t.Fatal(err)
	}
	// It then waits for its rows like a trainer, and when pserver-0 stops
	// the job, stops too, as Train does (the other pserver waits for it).
	var abort *transport.Aborted
	badComm := comm.NewTrainer(comm.Config{EP: bad, Trainers: 2, Transfers: []dsl.Transfer{{Var: ops.TableRows("emb"), Recv: true, AtMost: true}}}, j.PServerIDs())
	defer badComm.Close()
	_, err := badComm.Recv(ctx, 0, ir.PServer(0), ops.TableRows("emb"), make([]byte, 4*40*4))
	if !errors.As(err, &abort) || !strings.Contains(err.Error(), "trainer-1 asked for local row 99") {
		t.Errorf("trainer-1's request: %v; want pserver-0 to stop the job naming it", err)
	}
	badComm.StopJob(err)
	stop := hangWatch(t, 60*time.Second, "the job with a hostile trainer")
	wg.Wait()
	stop()
	const why = "trainer-1 asked for local row 99 of emb"
	if errs[0] == nil || !strings.Contains(errs[0].Error(), why) {
		t.Errorf("pserver-0: %v; want it to say %q", errs[0], why)
	}
	for i, name := range map[int]string{1: "pserver-1", 2: "trainer-0"} {
		var ab *transport.Aborted
		if errs[i] == nil || !strings.Contains(errs[i].Error(), why) && !errors.As(errs[i], &ab) {
			t.Errorf("%s: %v; want it stopped with pserver-0's reason", name, errs[i])
		}
	}
}

// A trainer run with a larger batch than the plan was split for would ask
// the shards for more rows than they accept: it refuses to start, saying
// which batch fits, before it sends anything.
func TestTableTrainerBatchAbovePlan(t *testing.T) {
	g := load(t, "../../testdata/sparse/emb-adagrad.yaml")
	g.Train.Batch = 4 // 12 ids a step, 12 rows at most
	if err := g.Check(); err != nil {
		t.Fatal(err)
	}
	plan, err := partition.Split(g, partition.Options{Trainers: 1, PServers: 2})
	if err != nil {
		t.Fatal(err)
	}
	j := &Job{Trainer: plan.Trainer, PServers: plan.PServers, Trainers: 1, Params: plan.Info.ServedParams()}
	rej := &rejections{}
	eps := jobEndpoints(t, "inmem", j, 8, rej)
	_, err = j.RunTrainer(context.Background(), 0, eps[transport.Trainer(0)], trainer.RunOptions{Steps: 1, Batch: 8, Log: zerolog.Nop()})
	want := "with batch 8 a trainer fetches up to 24 rows of table emb per step, but pserver-0 accepts at most 12 (the plan was split for batch 4): run the trainers with --batch 4 or less"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a trainer of batch 8 on a plan of batch 4: %v; want %q", err, want)
	}
	if tr := eps[transport.Trainer(0)].Traffic(); tr.Sent != 0 {
		t.Errorf("the trainer sent %d bytes before refusing", tr.Sent)
	}
	for _, b := range []int{0, 4, 2} { // the model's batch, and smaller ones, fit
		if err := j.tablesFit(b); err != nil {
			t.Errorf("batch %d: %v", b, err)
		}
	}
}

// A trainer of a sync table job killed and restarted: the shards cannot
// take it back (they serve every trainer at every step, and it would join
// at the step its dense parameters say), so instead of waiting forever the
// pservers stop the job saying so and what to do, and every node ends.
func TestTableTrainerRestartStopsSyncJob(t *testing.T) {
	j := tableJob(t, 2, 2, false)
	trainers, pservers := j.TrainerIDs(), j.PServerIDs()
	hub := transport.NewHub(nil, append(trainers, pservers...)...)
	specs := map[transport.NodeID][]transport.Spec{}
	for _, id := range append(trainers, pservers...) {
		s, err := j.Specs(id, 8)
		if err != nil {
			t.Fatal(err)
		}
		specs[id] = s
		hub.Endpoint(id).Accept(s...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(map[string]error)
	var mu sync.Mutex
	run := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := f()
			mu.Lock()
			errs[name] = err
			mu.Unlock()
		}()
	}
	for i := range 2 {
		run(pservers[i].String(), func() error {
			_, err := j.RunPServer(ctx, i, hub.Endpoint(pservers[i]), pserver.ServeOptions{Log: zerolog.Nop(), ResumeStep: -1, TrainerTimeout: 20 * time.Second})
			return err
		})
	}
	opt := trainer.RunOptions{Steps: 100000, Batch: 8, LogEvery: 50, PServerTimeout: 20 * time.Second, Log: zerolog.Nop()}
	run("trainer-0", func() error {
		_, err := j.RunTrainer(ctx, 0, hub.Endpoint(trainers[0]), opt)
		return err
	})
	// trainer-1, first process: killed after step 50.
	at50 := newSignal()
	first := opt
	first.Log = zerolog.New(&syncLog{on: func(m map[string]any) {
		if s, _ := m["step"].(float64); s >= 50 {
			at50.fire()
		}
	}})
	ctx1, kill := context.WithCancel(ctx)
	defer kill()
	killed := make(chan error, 1)
	go func() {
		_, err := j.RunTrainer(ctx1, 1, hub.Endpoint(trainers[1]), first)
		killed <- err
	}()
	stop := hangWatch(t, 60*time.Second, "the table job with a restarted trainer")
	defer stop()
	if err := at50.wait(ctx); err != nil {
		t.Fatal(err)
	}
	kill()
	<-killed
	hub.Endpoint(trainers[1]).Close()
	run("trainer-1 (restarted)", func() error {
		o := opt
		o.StartStep = -1
		_, err := j.RunTrainer(ctx, 1, hub.Restart(trainers[1], specs[trainers[1]]...), o)
		return err
	})
	wg.Wait()
	const why = "a sync job with lookup tables cannot take a restarted trainer yet"
	said := false
	for name, err := range errs {
		t.Logf("%s: %v", name, err)
		if err == nil {
			t.Errorf("%s ended without an error in a job that stopped", name)
		}
		said = said || err != nil && strings.Contains(err.Error(), "trainer-1 restarted") && strings.Contains(err.Error(), why)
	}
	if !said {
		t.Errorf("no node said %q", why)
	}
}
