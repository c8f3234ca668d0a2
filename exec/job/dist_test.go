package job

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/pserver"
	"github.com/psgraph/psgraph/exec/trainer"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
)

// serveWhole makes runJobInmem's pservers run every update whole
// (ServeOptions.NoStream); served holds their summaries.
var (
	serveWhole bool
	servedMu   sync.Mutex
	served     []*pserver.ServeSummary
	// shardDir, when set, is where runJobInmem's pservers save their
	// lookup-table shards (pserver-<i>.safetensors).
	shardDir string
	// pserverProm, when set, gives runJobInmem's pservers their metrics.
	pserverProm func(transport.NodeID) *metrics.Node
)

// runInmemJob runs a whole job in this process over the in-memory transport.
func runInmemJob(t *testing.T, g *dsl.Graph, n, m int, async bool, opt trainer.RunOptions, minBlock int) []*trainer.Summary {
	t.Helper()
	mode := partition.Sync
	if async {
		mode = partition.Async
	}
	plan := splitWritten(t, g, partition.Options{Trainers: n, PServers: m, Mode: mode, MinBlockSize: minBlock})
	j := &Job{Trainer: plan.Trainer, PServers: plan.PServers, Trainers: n, Async: async, Params: plan.Info.ServedParams()}
	cut := false
	for _, p := range plan.Info.Params {
		cut = cut || len(p.Blocks) > 1 && !p.Table()
	}
	if minBlock > 0 && !cut {
		t.Fatalf("min block size %d cut no parameter; the test means to run row blocks", minBlock)
	}
	return runJobInmem(t, j, opt)
}

// splitWritten splits g as split would write it: every file goes through
// Marshal and Load.
func splitWritten(t *testing.T, g *dsl.Graph, opt partition.Options) *partition.Plan {
	t.Helper()
	plan, err := partition.Split(g, opt)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := plan.Write(dir); err != nil {
		t.Fatal(err)
	}
	if plan, err = partition.ReadPlan(dir); err != nil {
		t.Fatal(err)
	}
	return plan
}

func runJobInmem(t *testing.T, j *Job, opt trainer.RunOptions) []*trainer.Summary {
	t.Helper()
	trainers, pservers := j.TrainerIDs(), j.PServerIDs()
	hub := transport.NewHub(func(err error) { t.Errorf("rejected: %v", err) }, append(trainers, pservers...)...)
	for _, id := range append(trainers, pservers...) {
		specs, err := j.Specs(id, opt.Batch)
		if err != nil {
			t.Fatal(err)
		}
		hub.Endpoint(id).Accept(specs...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(trainers)+len(pservers))
	sums := make([]*trainer.Summary, len(trainers))
	for i, id := range pservers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			so := pserver.ServeOptions{InitFrom: opt.InitFrom, Log: zerolog.Nop(), ResumeStep: -1, NoStream: serveWhole}
			if shardDir != "" {
				so.Save = filepath.Join(shardDir, id.String()+".safetensors")
			}
			if pserverProm != nil {
				so.Prom = pserverProm(id)
			}
			if ck := opt.Checkpoint; ck != nil {
				so.Checkpoint = &modelfile.Checkpointer{Dir: ck.Dir, Every: ck.Every, Node: id.String(), Model: j.PServers[i].Name}
			}
			sum, err := j.RunPServer(ctx, i, hub.Endpoint(id), so)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", id, err)
				cancel()
				return
			}
			servedMu.Lock()
			served = append(served, sum)
			servedMu.Unlock()
		}()
	}
	for i, id := range trainers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opt
			o.InitFrom, o.Checkpoint = "", nil
			if opt.StartStep < 0 { // resume: the pservers' newest common step
				o.StartStep = int(resumeStepOf(t, opt.Checkpoint.Dir, pservers))
			}
			if i != 0 {
				o.Save, o.Metrics = "", ""
			}
			s, err := j.RunTrainer(ctx, i, hub.Endpoint(id), o)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", id, err)
				cancel()
				return
			}
			sums[i] = s
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return sums
}

// N trainers with batch b compute what local training with batch N*b
// computes (the data stream rule and gradient averaging make them equal).
func TestSyncEqualsLocalInmem(t *testing.T) {
	for _, opt := range []string{"sgd", "adam"} {
		for _, c := range []struct{ n, m, minBlock int }{{1, 1, 0}, {2, 2, 0}, {3, 2, 0}, {2, 3, 20}} {
			n, m := c.n, c.m
			t.Run(fmt.Sprintf("%s/%dx%d/block%d", opt, n, m, c.minBlock), func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join("..", "..", "testdata", "optim", "mlp-"+opt+".yaml")
				g, err := dsl.Load(path)
				if err != nil {
					t.Fatal(err)
				}
				init := filepath.Join("..", "..", "testdata", "optim", "init.safetensors")
				local := filepath.Join(dir, "local.safetensors")
				if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 40, Batch: 10 * n, InitFrom: init, Save: local, Log: zerolog.Nop()}); err != nil {
					t.Fatal(err)
				}
				dist := filepath.Join(dir, "dist.safetensors")
				runInmemJob(t, g, n, m, false, trainer.RunOptions{Steps: 40, Batch: 10, InitFrom: init, Save: dist, Log: zerolog.Nop()}, c.minBlock)
				compareParams(t, local, dist, 1e-4)
			})
		}
	}
}

// A pserver that streams its updates (the gradient applied chunk by chunk
// as it arrives, or the mean of several pieces streamed through the
// update) ends bitwise where one running each update whole ends: sync and
// async, one and several trainers, with blocks small enough to be read
// ahead and large enough to be held and read straight into the update.
func TestStreamedServeEqualsWholeInmem(t *testing.T) {
	wide := filepath.Join(t.TempDir(), "wide.yaml")
	if err := os.WriteFile(wide, []byte(`psgraph: 1
name: wide
data:
  synthetic: {rows: 64, features: 512, classes: 10, seed: 3}
  features: {name: x}
  label: {name: label}
params:
  W: {shape: [512, 96], init: {type: normal, std: 0.05, seed: 1}}
  b: {shape: [96], init: {type: zeros}}
  V: {shape: [96, 10], init: {type: xavier_uniform, seed: 2}}
ops:
  - {type: matmul, inputs: [x, W], outputs: [h0]}
  - {type: add, inputs: [h0, b], outputs: [h1]}
  - {type: relu, inputs: [h1], outputs: [h]}
  - {type: matmul, inputs: [h, V], outputs: [logits]}
  - {type: softmax_cross_entropy, inputs: [logits, label], outputs: [loss]}
train:
  loss: loss
  batch: 8
  optimizer: {type: adam, lr: 0.01}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		model string
		n, m  int
		async bool
	}{
		{filepath.Join("..", "..", "testdata", "optim", "mlp-adam.yaml"), 1, 1, false},
		{filepath.Join("..", "..", "testdata", "optim", "mlp-momentum.yaml"), 2, 2, false},
		{wide, 1, 1, false},
		{wide, 2, 1, false},
		{wide, 1, 1, true},
	} {
		t.Run(fmt.Sprintf("%s/%dx%d/async=%v", filepath.Base(c.model), c.n, c.m, c.async), func(t *testing.T) {
			g, err := dsl.Load(c.model)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			out := map[bool]string{}
			for _, whole := range []bool{true, false} {
				out[whole] = filepath.Join(dir, fmt.Sprintf("whole-%v.safetensors", whole))
				serveWhole, served = whole, nil
				runInmemJob(t, g, c.n, c.m, c.async, trainer.RunOptions{Steps: 12, Batch: 8, Save: out[whole], Log: zerolog.Nop()}, 0)
				parts, streamed := 0, 0
				for _, s := range served {
					parts, streamed = parts+s.Parts, streamed+s.Streamed
				}
				if want := map[bool]int{true: 0, false: parts}[whole]; parts == 0 || streamed != want {
					t.Fatalf("whole=%v: %d of %d parts streamed, want %d", whole, streamed, parts, want)
				}
			}
			serveWhole = false
			compareParams(t, out[true], out[false], 0)
		})
	}
}

func TestAsyncConvergesInmem(t *testing.T) {
	g, err := dsl.Load(filepath.Join("..", "..", "examples", "digits-mlp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sums := runInmemJob(t, g, 2, 2, true, trainer.RunOptions{Steps: 500, Log: zerolog.Nop()}, 0)
	if acc := sums[0].Metrics["acc"]; acc < 0.95 {
		t.Fatalf("async 2x2 digits accuracy %.3f, want >= 0.95", acc)
	}
}

// sameDense checks that every tensor of b is in a, bit for bit (a, trainer
// 0's file of a job with tables, holds the tables too).
func sameDense(t *testing.T, a, b string) {
	t.Helper()
	ta, _, err := modelfile.LoadSafetensors(a)
	if err != nil {
		t.Fatal(err)
	}
	tb, _, err := modelfile.LoadSafetensors(b)
	if err != nil {
		t.Fatal(err)
	}
	for name, y := range tb {
		x := ta[name]
		if x == nil || !x.Shape.Equal(y.Shape) || !slices.Equal(x.F, y.F) {
			t.Errorf("%s: %s and %s differ", name, a, b)
		}
	}
}

// sameBytes checks that two files are equal byte for byte.
func sameBytes(t *testing.T, a, b string) {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x, y) {
		t.Errorf("%s (%d bytes) and %s (%d bytes) differ", a, len(x), b, len(y))
	}
}

func compareParams(t *testing.T, a, b string, tol float64) {
	t.Helper()
	ta, _, err := modelfile.LoadSafetensors(a)
	if err != nil {
		t.Fatal(err)
	}
	tb, _, err := modelfile.LoadSafetensors(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(ta) != len(tb) || len(ta) == 0 {
		t.Fatalf("%s holds %d tensors, %s %d", a, len(ta), b, len(tb))
	}
	worst := 0.0
	defer func() { t.Logf("largest relative difference %.2g", worst) }()
	for name, x := range ta {
		y := tb[name]
		if y == nil || !x.Shape.Equal(y.Shape) {
			t.Fatalf("%s: missing or shape differs", name)
		}
		d := relDiff(y.F, x.F)
		if d > tol {
			t.Errorf("%s: relative difference %.2g > %.0g", name, d, tol)
		}
		worst = max(worst, d)
	}
}

// A local run stopped after a checkpoint and resumed ends exactly where an
// uninterrupted run ends: parameters, optimizer state, the data stream
// position and the step a schedule reads all come back (momentum-step
// halves its rate every 10 steps: a count restarted at 0 would not).
func TestLocalCheckpointResume(t *testing.T) {
	for _, model := range []string{"adam", "momentum-step"} {
		t.Run(model, func(t *testing.T) {
			g, err := dsl.Load(filepath.Join("..", "..", "testdata", "optim", "mlp-"+model+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			whole, resumed := filepath.Join(dir, "whole.safetensors"), filepath.Join(dir, "resumed.safetensors")
			run := func(steps int, save string, ck *modelfile.Checkpointer) {
				t.Helper()
				if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: steps, Save: save, Checkpoint: ck, Log: zerolog.Nop()}); err != nil {
					t.Fatal(err)
				}
			}
			run(50, whole, nil)
			ck := &modelfile.Checkpointer{Dir: filepath.Join(dir, "ck"), Every: 10, Node: "local", Model: g.Name}
			run(35, "", ck) // checkpoints at 10, 20, 30 and the last step, 35; the last two kept
			m, ok, err := ck.Manifest()
			if err != nil || !ok || fmt.Sprint(m.Steps) != "[30 35]" {
				t.Fatalf("manifest %+v ok=%v err=%v, want steps [30 35]", m, ok, err)
			}
			run(50, resumed, ck) // resumes at 35
			compareParams(t, whole, resumed, 0)
		})
	}
}

// The same for a distributed job: pservers resume from their checkpoints
// and the trainers start at that step (with a step schedule on the
// pservers too, and with clip.norm's exchange).
func TestJobCheckpointResumeInmem(t *testing.T) {
	for _, model := range []string{"adam", "momentum-step", "adam-clip-norm"} {
		t.Run(model, func(t *testing.T) {
			g, err := dsl.Load(filepath.Join("..", "..", "testdata", "optim", "mlp-"+model+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			whole, resumed := filepath.Join(dir, "whole.safetensors"), filepath.Join(dir, "resumed.safetensors")
			runInmemJob(t, g, 2, 2, false, trainer.RunOptions{Steps: 40, Batch: 10, Save: whole, Log: zerolog.Nop()}, 20)
			ckDir := filepath.Join(dir, "ck")
			runInmemJob(t, g, 2, 2, false, trainer.RunOptions{Steps: 25, Batch: 10, Log: zerolog.Nop(), Checkpoint: &modelfile.Checkpointer{Dir: ckDir, Every: 10}}, 20)
			runInmemJob(t, g, 2, 2, false, trainer.RunOptions{Steps: 40, Batch: 10, Save: resumed, Log: zerolog.Nop(), Checkpoint: &modelfile.Checkpointer{Dir: ckDir, Every: 10}, StartStep: -1}, 20)
			compareParams(t, whole, resumed, 0)
		})
	}
}

func resumeStepOf(t *testing.T, dir string, nodes []transport.NodeID) int64 {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.String()
	}
	step, err := modelfile.CommonCheckpoint(dir, names)
	if err != nil {
		t.Fatal(err)
	}
	return step
}

// plannedTraffic is what a fresh job of steps steps moves, from the plan:
// per step a trainer sends every block's gradient and receives every
// block (plus the parameters of step 0), and each trainer and pserver
// exchange one position and one resume message (docs/runtime.md).
type plannedTraffic struct {
	trainerSent, trainerRecv int64
	pserverSent, pserverRecv []int64
}

func planTraffic(p *partition.Plan, steps int64) plannedTraffic {
	n, m := int64(p.Info.Trainers), p.Info.PServers
	pos, res := int64(comm.PositionSpec.Bytes), int64(comm.ResumeSpec.Bytes)
	blocks := make([]int64, m) // bytes of each pserver's parameter blocks
	var all int64
	for _, pl := range p.Info.Placement {
		blocks[pl.PServer] += int64(pl.Bytes)
		all += int64(pl.Bytes)
	}
	out := plannedTraffic{trainerSent: steps*all + int64(m)*pos, trainerRecv: (steps+1)*all + int64(m)*res}
	for _, b := range blocks {
		out.pserverSent = append(out.pserverSent, n*((steps+1)*b+res))
		out.pserverRecv = append(out.pserverRecv, n*(steps*b+pos))
	}
	return out
}

// Every node's summary reports the payload bytes the plan implies, and
// what the pservers sent is what the trainers received (in memory: the
// wire counts are 0). The same over TCP: cmd's TestNodeSummariesCountTraffic.
func TestJobSummariesCountTrafficInmem(t *testing.T) {
	for _, c := range []struct {
		n, m, minBlock int
		async          bool
	}{{1, 1, 0, false}, {2, 2, 0, false}, {2, 3, 20, false}, {2, 2, 0, true}} {
		t.Run(fmt.Sprintf("%dx%d/block%d/async=%v", c.n, c.m, c.minBlock, c.async), func(t *testing.T) {
			g, err := dsl.Load(filepath.Join("..", "..", "testdata", "optim", "mlp-sgd.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			mode := partition.Sync
			if c.async {
				mode = partition.Async
			}
			plan, err := partition.Split(g, partition.Options{Trainers: c.n, PServers: c.m, Mode: mode, MinBlockSize: c.minBlock})
			if err != nil {
				t.Fatal(err)
			}
			const steps = 15
			want := planTraffic(plan, steps)
			served = nil
			sums := runInmemJob(t, g, c.n, c.m, c.async, trainer.RunOptions{Steps: steps, Batch: 10, Log: zerolog.Nop()}, c.minBlock)
			var trainersRecv, trainersSent, pserversSent, pserversRecv int64
			for i, s := range sums {
				if s.SentBytes != want.trainerSent || s.RecvBytes != want.trainerRecv || s.WireSentBytes != 0 || s.WireRecvBytes != 0 {
					t.Errorf("trainer-%d: sent %d, received %d (wire %d, %d); the plan says %d and %d (wire 0)", i, s.SentBytes, s.RecvBytes, s.WireSentBytes, s.WireRecvBytes, want.trainerSent, want.trainerRecv)
				}
				trainersSent, trainersRecv = trainersSent+s.SentBytes, trainersRecv+s.RecvBytes
			}
			if len(served) != c.m {
				t.Fatalf("%d pserver summaries, want %d", len(served), c.m)
			}
			for _, s := range served {
				n, _ := ir.ParseNode(s.Role)
				i := n.Index
				if s.SentBytes != want.pserverSent[i] || s.RecvBytes != want.pserverRecv[i] {
					t.Errorf("%s: sent %d, received %d; the plan says %d and %d", s.Role, s.SentBytes, s.RecvBytes, want.pserverSent[i], want.pserverRecv[i])
				}
				pserversSent, pserversRecv = pserversSent+s.SentBytes, pserversRecv+s.RecvBytes
			}
			if pserversSent != trainersRecv || pserversRecv != trainersSent {
				t.Errorf("pservers sent %d and received %d; trainers received %d and sent %d", pserversSent, pserversRecv, trainersRecv, trainersSent)
			}
		})
	}
}

// A local run moves nothing.
func TestLocalSummaryHasNoTraffic(t *testing.T) {
	g, err := dsl.Load(filepath.Join("..", "..", "testdata", "optim", "mlp-sgd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 2, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	js, err := sum.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"sent_bytes":0,"recv_bytes":0,"wire_sent_bytes":0,"wire_recv_bytes":0,`) {
		t.Fatalf("local summary %s: want zero traffic", js)
	}
}

// A 2x2 sync job (and a 2x3 one with row blocks) with a learning-rate
// schedule, weight decay, AdamW, clipping by value or by the global norm
// (the pservers' partial sums of squares exchanged through the trainers)
// or dropout computes
// what local training with batch 2x computes: the step op, the schedule
// and the clip run on the pservers with the optimizer, on the trainers'
// mean gradient; each trainer's dropout draws its rows of the local mask.
func TestSyncScheduleClipEqualsLocalInmem(t *testing.T) {
	for _, model := range []string{"adam-warmup-cosine", "sgd-cosine", "momentum-step", "adagrad-exponential", "sgd-clip-value", "adamw", "momentum-wd", "dropout", "adam-clip-norm"} {
		for _, c := range []struct{ n, m, minBlock int }{{2, 2, 0}, {2, 3, 20}} {
			t.Run(fmt.Sprintf("%s/%dx%d/block%d", model, c.n, c.m, c.minBlock), func(t *testing.T) {
				dir := t.TempDir()
				g, err := dsl.Load(filepath.Join("..", "..", "testdata", "optim", "mlp-"+model+".yaml"))
				if err != nil {
					t.Fatal(err)
				}
				init := filepath.Join("..", "..", "testdata", "optim", "init.safetensors")
				local := filepath.Join(dir, "local.safetensors")
				if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 40, Batch: 10 * c.n, InitFrom: init, Save: local, Log: zerolog.Nop()}); err != nil {
					t.Fatal(err)
				}
				dist := filepath.Join(dir, "dist.safetensors")
				runInmemJob(t, g, c.n, c.m, false, trainer.RunOptions{Steps: 40, Batch: 10, InitFrom: init, Save: dist, Log: zerolog.Nop()}, c.minBlock)
				compareParams(t, local, dist, 1e-4)
			})
		}
	}
}

// In an async job the step op counts the updates the pserver applied: with
// one trainer those are the trainer's steps, so a 1x2 async job with a
// step schedule equals local training.
func TestAsyncScheduleOneTrainerEqualsLocalInmem(t *testing.T) {
	dir := t.TempDir()
	g, err := dsl.Load(filepath.Join("..", "..", "testdata", "optim", "mlp-momentum-step.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	init := filepath.Join("..", "..", "testdata", "optim", "init.safetensors")
	local := filepath.Join(dir, "local.safetensors")
	if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 30, Batch: 10, InitFrom: init, Save: local, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	dist := filepath.Join(dir, "dist.safetensors")
	runInmemJob(t, g, 1, 2, true, trainer.RunOptions{Steps: 30, Batch: 10, InitFrom: init, Save: dist, Log: zerolog.Nop()}, 0)
	compareParams(t, local, dist, 1e-4)
}
