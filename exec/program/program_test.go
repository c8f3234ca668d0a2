package program

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/internal/testfix"

	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/tensor"
)

func compileDigits(t testing.TB, workers int, keepTemps ...bool) (*Program, *Feeder, *data.Stream) {
	return compileModel(t, "../../examples/digits-mlp.yaml", 64, workers, len(keepTemps) > 0 && keepTemps[0])
}

// compileModel compiles the model file at path to train batches of
// batch rows, initialized, with its feeder and data stream.
func compileModel(t testing.TB, path string, batch, workers int, keepTemps bool) (*Program, *Feeder, *data.Stream) {
	g := testfix.Model(t, path)
	p, err := Compile(g, CompileOptions{Batch: batch, Workers: workers, KeepTemps: keepTemps})
	if err != nil {
		t.Fatal(err)
	}
	if err := Init(p, InitOptions{From: ""}); err != nil {
		t.Fatal(err)
	}
	loaded, err := data.LoadSplit(g.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := loaded.Train
	return p, NewFeeder(g, p.Scope), data.NewStream(set)
}

// A steady-state step allocates nothing: no tensor buffers, no scheduler state.
func TestStepDoesNotAllocate(t *testing.T) {
	for _, workers := range []int{1, 2, 4} {
		p, f, st := compileDigits(t, workers)
		rt := &Runtime{Ctx: context.Background()}
		k := int64(0)
		allocs := testing.AllocsPerRun(50, func() {
			f.Fill(st, k*64)
			rt.StepNum = k
			if err := p.Run(rt); err != nil {
				t.Fatal(err)
			}
			k++
		})
		p.Close()
		if allocs != 0 {
			t.Errorf("workers=%d: %.1f allocations per step, want 0", workers, allocs)
		}
	}
}

// A step with a learning-rate schedule, weight decay, clipping by value
// and by norm, and dropout allocates nothing either.
func TestTrainingControlStepDoesNotAllocate(t *testing.T) {
	src, err := os.ReadFile("../../testdata/optim/mlp-dropout.yaml")
	if err != nil {
		t.Fatal(err)
	}
	model := strings.Replace(string(src), "  optimizer: {type: momentum, lr: 0.05, momentum: 0.9}",
		"  clip: {value: 1, norm: 1}\n  optimizer: {type: adam, weight_decay: 0.01, lr: {value: 0.01, schedule: cosine, warmup: 5}}", 1)
	g, err := dsl.LoadBytes("../../testdata/optim/m.yaml", []byte(model))
	if err != nil {
		t.Fatal(err)
	}
	for _, workers := range []int{1, 2} {
		p, err := Compile(g, CompileOptions{Batch: 30, Workers: workers})
		if err != nil {
			t.Fatal(err)
		}
		if err := Init(p, InitOptions{From: ""}); err != nil {
			t.Fatal(err)
		}
		rt := &Runtime{Ctx: context.Background()}
		allocs := testing.AllocsPerRun(20, func() {
			if err := p.Run(rt); err != nil {
				t.Fatal(err)
			}
			rt.StepNum++
		})
		p.Close()
		if allocs != 0 {
			t.Errorf("workers=%d: %.1f allocations per step, want 0", workers, allocs)
		}
	}
}

// The concurrent scheduler computes exactly what the sequential order does.
func TestConcurrentEqualsSequential(t *testing.T) {
	run := func(workers int) map[string][]float32 {
		p, f, st := compileDigits(t, workers)
		defer p.Close()
		rt := &Runtime{Ctx: context.Background()}
		for k := int64(0); k < 30; k++ {
			f.Fill(st, k*64)
			rt.StepNum = k
			if err := p.Run(rt); err != nil {
				t.Fatal(err)
			}
		}
		out := map[string][]float32{}
		for _, n := range p.Graph.Params() {
			out[n] = append([]float32{}, p.Scope[n].F...)
		}
		return out
	}
	seq, par := run(1), run(4)
	for n, s := range seq {
		for i := range s {
			if s[i] != par[n][i] {
				t.Fatalf("%s[%d]: sequential %v, concurrent %v", n, i, s[i], par[n][i])
			}
		}
	}
}

// Assigns move next-step values into persistent variables: after one sgd
// step, W = W0 - lr * dW, where dW is what the step computed.
func TestAssignAppliesUpdate(t *testing.T) {
	p, f, st := compileDigits(t, 2, true)
	defer p.Close()
	w0 := append([]float32{}, p.Scope["W2"].F...)
	f.Fill(st, 0)
	if err := p.Run(&Runtime{Ctx: context.Background()}); err != nil {
		t.Fatal(err)
	}
	grad := p.Scope["W2@GRAD"].F
	for i, w := range p.Scope["W2"].F {
		if want := w0[i] - 0.1*grad[i]; math.Abs(float64(w-want)) > 1e-6 {
			t.Fatalf("W2[%d] = %v, want %v", i, w, want)
		}
	}
}

// A block of a parameter gets exactly its rows of the whole parameter's values.
func TestInitializeBlockEqualsRowsOfWhole(t *testing.T) {
	g := testfix.Model(t, "../../examples/digits-mlp.yaml")
	in := g.Vars["W1"].Init
	whole := tensor.New(tensor.F32, tensor.Shape{64, 128})
	if err := Initialize(whole, in, "W1", nil, 0, 1, nil); err != nil {
		t.Fatal(err)
	}
	block := tensor.New(tensor.F32, tensor.Shape{20, 128})
	if err := Initialize(block, in, "W1", tensor.Shape{64, 128}, 30, 1, nil); err != nil {
		t.Fatal(err)
	}
	for i, v := range block.F {
		if v != whole.F[30*128+i] {
			t.Fatalf("block[%d] = %v, whole = %v", i, v, whole.F[30*128+i])
		}
	}
	// A shard of rows 2, 5, 8, ... (row id mod 3 = 2) gets those rows.
	shard := tensor.New(tensor.F32, tensor.Shape{21, 128})
	if err := Initialize(shard, in, "W1", tensor.Shape{64, 128}, 2, 3, nil); err != nil {
		t.Fatal(err)
	}
	for i, v := range shard.F {
		if r := 2 + 3*(i/128); v != whole.F[r*128+i%128] {
			t.Fatalf("shard[%d] (row %d) = %v, whole = %v", i, r, v, whole.F[r*128+i%128])
		}
	}
	// he_normal: std sqrt(2/fan_in) = sqrt(2/64)
	var sq float64
	for _, v := range whole.F {
		sq += float64(v) * float64(v)
	}
	if std := math.Sqrt(sq / float64(len(whole.F))); math.Abs(std-math.Sqrt(2.0/64)) > 0.01 {
		t.Fatalf("he_normal std %.4f, want %.4f", std, math.Sqrt(2.0/64))
	}
}

// BenchmarkDigitsStep is a local step of examples/digits-mlp.yaml (64-128-10,
// batch 64); bench/mlp_torch.py is its PyTorch twin.
func BenchmarkDigitsStep(b *testing.B) {
	p, f, st := compileDigits(b, 0)
	defer p.Close()
	benchSteps(b, p, f, st, 64, 2*64*(2*64*128+3*128*10)) // as BenchmarkWideStep's

}

// enqueue/dequeue: a dequeue with min_count 2 blocks across steps until two
// items are queued, then outputs their mean; the queue persists across steps.
func TestEnqueueDequeue(t *testing.T) {
	src := []byte(`psgraph: 1
name: queues
params:
  c: {shape: [3], init: {type: constant, value: 1}}
ops:
  - {type: scale, inputs: [c], outputs: [x]}
  - {type: enqueue, inputs: [x], outputs: [], attrs: {queue: q, capacity: 4}}
  - {type: scale, inputs: [c], outputs: [c2], attrs: {factor: 2}}
assign: {c: c2}
`)
	g, err := dsl.LoadBytes("queues.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	deq, err := dsl.LoadBytes("deq.yaml", []byte(`psgraph: 1
name: deq
ops:
  - {type: dequeue, outputs: [y], attrs: {queue: q, capacity: 4, min_count: 2, shape: [3]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(g, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := Init(p, InitOptions{From: ""}); err != nil {
		t.Fatal(err)
	}
	d, err := Compile(deq, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rt := &Runtime{Ctx: context.Background()} // one node: one set of queues
	got := make(chan error, 1)
	go func() { got <- d.Run(rt) }()
	for k := 0; k < 2; k++ { // enqueues c = 1, then c = 2
		if err := p.Run(rt); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	for i, v := range d.Scope["y"].F {
		if v != 1.5 {
			t.Fatalf("y[%d] = %v, want the mean 1.5 of the two queued tensors", i, v)
		}
	}
}

// A blocking op that waits on a later op of the same step (a dequeue the
// caller runs first, fed by an enqueue in the same graph) is run beside it
// from the first step on: every helper joins the first step, even one
// that started after it began. A trainer with train.clip.norm depends on
// this (its recv of the pservers' partial norms waits on its own
// gradient sends). The context's deadline turns a deadlock into a failure.
func TestFirstStepUsesEveryHelper(t *testing.T) {
	g, err := dsl.LoadBytes("q.yaml", []byte(`psgraph: 1
name: q
state:
  x: {shape: [3], init: {type: constant, value: 2}}
ops:
  - {type: enqueue, inputs: [x], outputs: [], attrs: {queue: q, capacity: 1}}
  - {type: dequeue, outputs: [y], attrs: {queue: q, capacity: 1, min_count: 1, shape: [3]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		p, err := Compile(g, CompileOptions{Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := Init(p, InitOptions{From: ""}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = p.Run(&Runtime{Ctx: ctx})
		cancel()
		p.Close()
		if err != nil {
			t.Fatalf("first step: %v (the dequeue waited for an enqueue no goroutine ran)", err)
		}
		if y := p.Scope["y"].F[0]; y != 2 {
			t.Fatalf("y = %v, want 2", y)
		}
	}
}

// In-place element-wise ops and reshapes viewing their input change no
// result: the same steps with every temporary in its own buffer give
// bitwise the same parameters, for an MLP and for an embedding model
// whose lookup's rows are reshaped (its reshape's output is its input's
// buffer, and so is the gradient's).
func TestInPlaceEqualsKeepTemps(t *testing.T) {
	emb := func(keep bool) (*Program, *Feeder, *data.Stream) {
		return compileModel(t, "../../testdata/sparse/emb-adagrad.yaml", 16, 2, keep)
	}
	// predicting, e is read by the reshape alone (training, the reshape
	// of the gradient reads it too, for its shape): h is e's buffer, and
	// the logits are those of separate buffers
	var logits [2][]float32
	for i, keep := range []bool{false, true} {
		g := testfix.Model(t, "../../testdata/sparse/emb-adagrad.yaml")
		p, err := Compile(g, CompileOptions{Batch: 16, Targets: []string{"logits"}, KeepTemps: keep})
		if err != nil {
			t.Fatal(err)
		}
		if err := Init(p, InitOptions{From: ""}); err != nil {
			t.Fatal(err)
		}
		h, e := p.Scope["h"], p.Scope["e"]
		if view := &h.F[0] == &e.F[0]; view == keep || !h.Shape.Equal(tensor.Shape{16, 12}) || !e.Shape.Equal(tensor.Shape{16, 3, 4}) {
			t.Errorf("keep temps %v: reshape's output h %v a view of its input e %v: %v", keep, h.Shape, e.Shape, view)
		}
		for j := range p.Scope["ids"].I {
			p.Scope["ids"].I[j] = int32(j*7) % 40
		}
		for _, w := range []string{"emb", "W"} {
			for j := range p.Scope[w].F {
				p.Scope[w].F[j] = float32(j%13) - 6
			}
		}
		if err := p.Run(&Runtime{Ctx: context.Background()}); err != nil {
			t.Fatal(err)
		}
		logits[i] = slices.Clone(p.Scope["logits"].F)
		p.Close()
	}
	if !slices.Equal(logits[0], logits[1]) || slices.Max(logits[1]) == 0 {
		t.Errorf("logits through the view %v, through a copy %v", logits[0], logits[1])
	}
	for _, model := range []func(bool) (*Program, *Feeder, *data.Stream){emb, func(keep bool) (*Program, *Feeder, *data.Stream) { return compileDigits(t, 2, keep) }} {
		testInPlace(t, model)
	}
}

func testInPlace(t *testing.T, compile func(keep bool) (*Program, *Feeder, *data.Stream)) {
	run := func(keep bool) map[string][]float32 {
		p, f, st := compile(keep)
		defer p.Close()
		batch := int64(p.Scope[p.Graph.Data.Columns()[0].Name].Shape[0])
		for k := 0; k < 20; k++ {
			f.Fill(st, int64(k)*batch)
			if err := p.Run(&Runtime{Ctx: context.Background()}); err != nil {
				t.Fatal(err)
			}
		}
		out := map[string][]float32{}
		for _, n := range p.Graph.Params() {
			out[n] = append([]float32(nil), p.Scope[n].F...)
		}
		return out
	}
	a, b := run(false), run(true)
	for n := range a {
		for i := range a[n] {
			if a[n][i] != b[n][i] {
				t.Fatalf("%s[%d]: %v in place, %v with separate buffers", n, i, a[n][i], b[n][i])
			}
		}
	}
	p, _, _ := compileDigits(t, 1)
	defer p.Close()
	seen := map[*tensor.Tensor]bool{}
	for _, tt := range p.Scope {
		seen[tt] = true
	}
	if len(seen) == len(p.Scope) {
		t.Fatal("no temporary shares a buffer: in-place reuse is not happening")
	}
}

// BenchmarkSchedulerPerOp measures the executor's cost per op: a chain of
// 200 scale ops on one element, so the kernels cost next to nothing.
func BenchmarkSchedulerPerOp(b *testing.B) {
	src := "psgraph: 1\nname: chain\nparams:\n  p: {shape: [1]}\nops:\n  - {type: scale, inputs: [p], outputs: [v0]}\n"
	const n = 200
	for i := 1; i < n; i++ {
		src += fmt.Sprintf("  - {type: scale, inputs: [v%d], outputs: [v%d]}\n", i-1, i)
	}
	g, err := dsl.LoadBytes("chain.yaml", []byte(src))
	if err != nil {
		b.Fatal(err)
	}
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			p, err := Compile(g, CompileOptions{Workers: workers, KeepTemps: true})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			rt := &Runtime{Ctx: context.Background()}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := p.Run(rt); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/op-each")
		})
	}
}

// A failing op reaches OnError on both paths (concurrent and sequential,
// the one every pserver part runs), and a cancelled step is reported as
// context.Canceled itself, not as a failure of the op that was waiting.
func TestOnErrorAndCancelOnEveryPath(t *testing.T) {
	g := testfix.Model(t, "../../testdata/sparse/emb-sgd.yaml")
	for _, seq := range []bool{false, true} {
		p, err := Compile(g, CompileOptions{Sequential: seq, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		p.Scope["ids"].I[0] = 1000 // outside the 40-row table: lookup_table fails
		var got error
		p.OnError = func(err error) { got = err }
		err = p.Run(&Runtime{Ctx: context.Background()})
		if err == nil || got == nil || !strings.Contains(err.Error(), "lookup_table") {
			t.Errorf("sequential=%v: Run %v, OnError got %v; want both, naming lookup_table", seq, err, got)
		}
		p.Close()
	}
	// recv with no peer: a cancelled context is the error itself.
	src := `psgraph: 1
name: cancel
ops:
  - {type: recv, outputs: [x], attrs: {var: x, from: "pserver:0", shape: [2]}}
`
	cg, err := dsl.LoadBytes("cancel.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []bool{false, true} {
		p, err := Compile(cg, CompileOptions{Sequential: seq, Node: kernels.Node{Role: ir.TrainerRole}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err = p.Run(&Runtime{Ctx: ctx, RV: cancelledComm{}})
		p.Close()
		if err != context.Canceled {
			t.Errorf("sequential=%v: a cancelled step returned %v, want context.Canceled itself", seq, err)
		}
	}
}

// cancelledComm's recv returns the context's error, as a transport does.
type cancelledComm struct{}

func (cancelledComm) Send(context.Context, int64, ir.Node, string, ir.DType, []byte) error {
	return nil
}

func (cancelledComm) Recv(ctx context.Context, _ int64, _ ir.Node, _ string, _ []byte) (int, error) {
	return 0, ctx.Err()
}

// A program compiled for targets with a shared input runs the ops after
// that input even when the op producing it (which does not run) comes
// first: no node waits on an op the program left out.
func TestTargetsAfterASharedInputRun(t *testing.T) {
	g, err := dsl.LoadBytes("shared.yaml", []byte(`psgraph: 1
state:
  x: {shape: [4]}
ops:
  - {type: relu, inputs: [x], outputs: [y]}
  - {type: scale, inputs: [y], outputs: [z], attrs: {factor: 3}}
  - {type: scale, inputs: [y], outputs: [w], attrs: {factor: 2}}
`))
	if err != nil {
		t.Fatal(err)
	}
	y := tensor.New(tensor.F32, tensor.Shape{4})
	copy(y.F, []float32{1, -2, 3, 0.5})
	p, err := Compile(g, CompileOptions{Targets: []string{"z", "w"}, Shared: Scope{"y": y}, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(&Runtime{Ctx: context.Background()}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the step never ended: a node waits on an op the program does not run")
	}
	defer p.Close()
	for i := range y.F {
		if z, w := p.Scope["z"].F[i], p.Scope["w"].F[i]; z != 3*y.F[i] || w != 2*y.F[i] {
			t.Fatalf("z = %v, w = %v; want 3y and 2y of y = %v", p.Scope["z"].F, p.Scope["w"].F, y.F)
		}
	}
}
