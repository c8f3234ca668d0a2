package program

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/blas"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/partition"
)

// streamOptimizers are the optimizers the streaming tests run, as the
// model's train.optimizer (indented under it).
var streamOptimizers = []struct{ name, yaml string }{
	{"sgd", "{type: sgd, lr: 0.1}"},
	{"momentum", "{type: momentum, lr: 0.1, momentum: 0.9}"},
	{"adam", "{type: adam, lr: 0.01}"},
	{"adagrad", "{type: adagrad, lr: 0.1}"},
	{"custom-momentum", `
    lr: 0.05
    state: {velocity: {init: zeros}}
    update:
      - {type: scale, inputs: [$velocity], outputs: [v_decay], attrs: {factor: 0.9}}
      - {type: add, inputs: [v_decay, $grad], outputs: [v_new]}
      - {type: scale, inputs: [v_new], outputs: [step], attrs: {factor: $lr}}
      - {type: sub, inputs: [$param, step], outputs: [p_new]}
    assign: {$velocity: v_new, $param: p_new}`},
	// A user optimizer that reads the old velocity after computing the new
	// one, keeps a scalar step count, and scales with both a factor and a
	// bias: blas.Scale's vector body (one FMA) and its scalar tail (a
	// multiply, then an add) round that differently, so a piece not
	// aligned to the block start changes bits.
	{"custom-tricky", `
    lr: 0.05
    state: {velocity: {init: zeros}, count: {shape: [], init: zeros}}
    update:
      - {type: scale, inputs: [$count], outputs: [count_new], attrs: {bias: 1}}
      - {type: scale, inputs: [$velocity], outputs: [v_decay], attrs: {factor: 0.9}}
      - {type: add, inputs: [v_decay, $grad], outputs: [v_new]}
      - {type: add, inputs: [v_new, $velocity], outputs: [both]}
      - {type: div, inputs: [both, count_new], outputs: [avg]}
      - {type: scale, inputs: [avg], outputs: [step], attrs: {factor: $lr, bias: 0.0001}}
      - {type: sub, inputs: [$param, step], outputs: [p_new]}
    assign: {$velocity: v_new, $param: p_new, $count: count_new}`},
}

// streamModel is a one-layer model whose parameter W is [rows, cols]
// (with a bias b when bias is set), trained with optimizer (the YAML of
// train.optimizer).
func streamModel(t testing.TB, rows, cols int, optimizer string, bias bool) *dsl.Graph {
	t.Helper()
	params, out := "", "  - {type: identity, inputs: [z], outputs: [logits]}\n"
	if bias {
		params = fmt.Sprintf("  b: {shape: [%d]}\n", cols)
		out = "  - {type: add, inputs: [z, b], outputs: [logits]}\n"
	}
	src := fmt.Sprintf(`psgraph: 1
name: stream
data:
  synthetic: {rows: 16, features: %d, classes: %d, seed: 1}
  features: {name: x}
  label: {name: label}
params:
  W: {shape: [%d, %d], init: {type: normal, std: 0.1, seed: 1}}
%sops:
  - {type: matmul, inputs: [x, W], outputs: [z]}
%s  - {type: softmax_cross_entropy, inputs: [logits, label], outputs: [loss]}
train:
  loss: loss
  batch: 8
  optimizer: %s
`, rows, cols, rows, cols, params, out, optimizer)
	g, err := dsl.LoadBytes("stream.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// pserverOf returns pserver 0's subgraph of g split for 2 sync trainers
// (accumulate count 2), W kept whole.
func pserverOf(t testing.TB, g *dsl.Graph) *dsl.Graph {
	t.Helper()
	plan, err := partition.Split(g, partition.Options{Trainers: 2, PServers: 1, MinBlockSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	return plan.PServers[0]
}

// streamPart is the pserver part updating W of streamModel.
func streamPart(t testing.TB, rows, cols int, optimizer string) *dsl.Graph {
	t.Helper()
	parts := Components(pserverOf(t, streamModel(t, rows, cols, optimizer, false)))
	if len(parts) != 1 {
		t.Fatalf("%d parts, want the one updating W", len(parts))
	}
	return parts[0]
}

// compilePart compiles a part as Serve does and initializes its variables.
func compilePart(t testing.TB, part *dsl.Graph) *Program {
	t.Helper()
	p, err := Compile(part, CompileOptions{Sequential: true, Node: kernels.Node{Role: ir.PServerRole}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Init(p, InitOptions{From: "", Partial: true}); err != nil {
		t.Fatal(err)
	}
	return p
}

// streamComm is a pserver part's rendezvous without a network: a receive
// of the gradient writes grad (when set) and Send keeps a copy of the last
// payload of each transfer (when sent is set).
type streamComm struct {
	grad []float32
	sent map[string][]float32
}

func (c *streamComm) Send(_ context.Context, _ int64, _ ir.Node, v string, _ ir.DType, payload []byte) error {
	if c.sent != nil {
		c.sent[v] = append(c.sent[v][:0], tensor.F32View(payload)...)
	}
	return nil
}

func (c *streamComm) Reply(ctx context.Context, _ int64, _, v string, dt ir.DType, payload []byte) error {
	return c.Send(ctx, 0, ir.Node{}, v, dt, payload)
}

func (c *streamComm) Recv(_ context.Context, _ int64, _ ir.Node, _ string, dst []byte) (int, error) {
	if c.grad != nil {
		copy(tensor.F32View(dst), c.grad)
	}
	return len(dst), nil
}

func (c *streamComm) RecvAny(ctx context.Context, v string, dst []byte) (int, ir.Node, int64, error) {
	n, err := c.Recv(ctx, 0, ir.Node{}, v, dst)
	return n, ir.Trainer(0), 0, err
}

// Pending: the gradient is always there.
func (c *streamComm) Pending(_ context.Context, vs []string) (string, error) { return vs[0], nil }

// randomGrad is a gradient with values over several magnitudes.
func randomGrad(rng *rand.Rand, n int) []float32 {
	mag := [...]float64{1, 0.1, 0.01, 0.001}
	g := make([]float32, n)
	for i := range g {
		g[i] = float32(rng.NormFloat64() * mag[rng.IntN(len(mag))])
	}
	return g
}

// chunkSplits cut a block of n elements into the ranges passed to Chunk.
var chunkSplits = []struct {
	name  string
	sizes func(rng *rand.Rand, n int) []int
}{
	{"whole", func(_ *rand.Rand, n int) []int { return []int{n} }},
	{"1", func(_ *rand.Rand, n int) []int { return fixedSizes(n, 1) }},
	{"7", func(_ *rand.Rand, n int) []int { return fixedSizes(n, 7) }},
	{"1000", func(_ *rand.Rand, n int) []int { return fixedSizes(n, 1000) }},
	{"random", func(rng *rand.Rand, n int) []int {
		var s []int
		for left := n; left > 0; {
			k := min(left, rng.IntN(3000)) // 0 too: an empty chunk is allowed
			s = append(s, k)
			left -= k
		}
		return s
	}},
}

func fixedSizes(n, k int) []int {
	var s []int
	for off := 0; off < n; off += k {
		s = append(s, min(k, n-off))
	}
	return s
}

// streamStep runs one step of s, passing the gradient in the given sizes
// through a scratch buffer that is clobbered after every call (Chunk must
// not keep grad).
func streamStep(s *Streamer, rt *Runtime, grad []float32, sizes []int, scratch []float32) error {
	if err := s.Begin(rt); err != nil {
		return err
	}
	off := 0
	for _, n := range sizes {
		buf := scratch[:n]
		copy(buf, grad[off:off+n])
		if err := s.Chunk(off, buf); err != nil {
			return err
		}
		for i := range buf {
			buf[i] = float32(math.NaN())
		}
		off += n
	}
	return s.End(rt)
}

func sameBits(a, b []float32) (int, bool) {
	if len(a) != len(b) {
		return -1, false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i, false
		}
	}
	return 0, true
}

// Streaming a part's update gives bitwise what Program.Run gives: every
// persistent variable after each step, and what each step sent, for every
// built-in optimizer and user-written ones, for blocks that are not a
// multiple of the piece size, whatever sizes the gradient comes in.
func TestStreamerEqualsProgram(t *testing.T) {
	if !scaleTailDiffers() {
		t.Log("this host's blas.Scale rounds alike in its vector body and scalar tail: piece alignment is not exercised")
	}
	const steps = 3
	shapes := [][2]int{{3, 5}, {37, 53}, {300, 257}} // smaller than a piece, not a multiple of 64, many pieces
	for _, o := range streamOptimizers {
		for _, sh := range shapes {
			part := streamPart(t, sh[0], sh[1], o.yaml)
			n := sh[0] * sh[1]
			for _, chunk := range []int{100, DefaultStreamChunk} {
				for _, split := range chunkSplits {
					t.Run(fmt.Sprintf("%s/%dx%d/chunk=%d/split=%s", o.name, sh[0], sh[1], chunk, split.name), func(t *testing.T) {
						ref, str := compilePart(t, part), compilePart(t, part)
						defer ref.Close()
						defer str.Close()
						s, why := NewStreamer(str, chunk)
						if s == nil {
							t.Fatalf("not streamable: %s", why)
						}
						if g := s.Grad(); g.Var != "W@GRAD" || g.Count != 2 || g.Bytes != 4*n || !g.Shape.Equal(tensor.Shape{sh[0], sh[1]}) {
							t.Fatalf("Grad() = %+v, want W@GRAD, count 2, %d bytes, shape %v", g, 4*n, sh)
						}
						rng := rand.New(rand.NewPCG(1, uint64(n)))
						scratch := make([]float32, n)
						for k := int64(0); k < steps; k++ {
							grad := randomGrad(rng, n)
							rc := &streamComm{grad: grad, sent: map[string][]float32{}}
							if err := ref.Run(&Runtime{Ctx: context.Background(), PS: rc, StepNum: k}); err != nil {
								t.Fatal(err)
							}
							sc := &streamComm{sent: map[string][]float32{}}
							if err := streamStep(s, &Runtime{Ctx: context.Background(), PS: sc, StepNum: k}, grad, split.sizes(rng, n), scratch); err != nil {
								t.Fatal(err)
							}
							for name, want := range PersistentOf(ref) {
								if i, ok := sameBits(str.Scope[name].F, want.F); !ok {
									t.Fatalf("step %d: %s[%d] = %v streamed, %v by Program.Run", k, name, i, str.Scope[name].F[i], want.F[i])
								}
							}
							if len(sc.sent) != len(rc.sent) || len(rc.sent) == 0 {
								t.Fatalf("step %d: sent %d transfers streamed, %d by Program.Run", k, len(sc.sent), len(rc.sent))
							}
							for v, want := range rc.sent {
								if i, ok := sameBits(sc.sent[v], want); !ok {
									t.Fatalf("step %d: sent %s differs at %d", k, v, i)
								}
							}
						}
					})
				}
			}
		}
	}
}

// scaleTailDiffers reports whether blas.Scale's vector body and scalar
// tail give different bits for a factor-and-bias scale, which is what the
// streamer's piece alignment guards against.
func scaleTailDiffers() bool {
	rng := rand.New(rand.NewPCG(3, 4))
	x := randomGrad(rng, 1024)
	whole, single := make([]float32, len(x)), make([]float32, len(x))
	blas.Scale(0.05, 0.0001, x, whole)
	for i := range x {
		blas.Scale(0.05, 0.0001, x[i:i+1], single[i:i+1])
	}
	_, same := sameBits(whole, single)
	return !same
}

// Parts that need the whole block, or whose update cannot be written in
// place piece by piece, are not streamed and say why.
func TestNewStreamerRejects(t *testing.T) {
	twoParams := streamModel(t, 8, 5, "{type: sgd, lr: 0.1}", true)
	for _, c := range []struct {
		name string
		part func(t *testing.T) *dsl.Graph
		want string
	}{
		{"gradient norm", func(t *testing.T) *dsl.Graph {
			return streamPart(t, 8, 5, `
    lr: 0.1
    update:
      - {type: mul, inputs: [$grad, $grad], outputs: [g2]}
      - {type: sum, inputs: [g2], outputs: [n2]}
      - {type: sqrt, inputs: [n2], outputs: [norm]}
      - {type: div, inputs: [$grad, norm], outputs: [unit]}
      - {type: scale, inputs: [unit], outputs: [step], attrs: {factor: $lr}}
      - {type: sub, inputs: [$param, step], outputs: [p_new]}
    assign: {$param: p_new}`)
		}, "op sum ([W@g2] -> [W@n2])"},
		{"row broadcast", func(t *testing.T) *dsl.Graph {
			return streamPart(t, 8, 5, `
    lr: 0.1
    state: {shift: {shape: [5], init: zeros}}
    update:
      - {type: add, inputs: [$grad, $shift], outputs: [shifted]}
      - {type: scale, inputs: [shifted], outputs: [step], attrs: {factor: $lr}}
      - {type: sub, inputs: [$param, step], outputs: [p_new]}
    assign: {$param: p_new}`)
		}, "broadcasts W@shift of shape [5] over the block [8, 5]"},
		{"assign from a persistent", func(t *testing.T) *dsl.Graph {
			return streamPart(t, 8, 5, `
    lr: 0.1
    state: {prev: {init: zeros}}
    update:
      - {type: scale, inputs: [$grad], outputs: [step], attrs: {factor: $lr}}
      - {type: sub, inputs: [$param, step], outputs: [p_new]}
    assign: {$param: p_new, $prev: $param}`)
		}, "assign W@prev = W"},
		{"two accumulates", func(t *testing.T) *dsl.Graph { return pserverOf(t, twoParams) }, "more than one accumulate"},
		{"no accumulate", func(t *testing.T) *dsl.Graph { return twoParams }, "no accumulate op"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := compilePart(t, c.part(t))
			defer p.Close()
			s, why := NewStreamer(p, 64)
			if s != nil || !strings.Contains(why, c.want) {
				t.Fatalf("NewStreamer = %v, %q; want nil and a reason containing %q", s, why, c.want)
			}
		})
	}
}

// Calls that do not cover the block in order, once, are errors.
func TestStreamerChunkOrder(t *testing.T) {
	part := streamPart(t, 10, 10, "{type: sgd, lr: 0.1}")
	g := make([]float32, 100)
	for _, c := range []struct {
		name string
		run  func(s *Streamer, rt *Runtime) error
		want string
	}{
		{"chunk before begin", func(s *Streamer, rt *Runtime) error { return s.Chunk(0, g) }, "Chunk before Begin"},
		{"gap", func(s *Streamer, rt *Runtime) error {
			s.Begin(rt)
			s.Chunk(0, g[:10])
			return s.Chunk(11, g[11:20])
		}, "chunk at element 11, want 10"},
		{"past the end", func(s *Streamer, rt *Runtime) error {
			s.Begin(rt)
			return s.Chunk(90, make([]float32, 11))
		}, "chunk at element 90, want 0"},
		{"overflow", func(s *Streamer, rt *Runtime) error {
			s.Begin(rt)
			return s.Chunk(0, make([]float32, 101))
		}, "ends past the block's 100 elements"},
		{"end early", func(s *Streamer, rt *Runtime) error {
			s.Begin(rt)
			s.Chunk(0, g[:99])
			return s.End(rt)
		}, "End after 99 of the block's 100 elements"},
		{"end twice", func(s *Streamer, rt *Runtime) error {
			s.Begin(rt)
			s.Chunk(0, g)
			if err := s.End(rt); err != nil {
				return err
			}
			return s.End(rt)
		}, "End after 100"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := compilePart(t, part)
			defer p.Close()
			s, why := NewStreamer(p, 64)
			if s == nil {
				t.Fatal(why)
			}
			err := c.run(s, &Runtime{Ctx: context.Background(), PS: &streamComm{}})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// A streamed step allocates nothing, whatever the chunk sizes.
func TestStreamerDoesNotAllocate(t *testing.T) {
	for _, o := range streamOptimizers {
		t.Run(o.name, func(t *testing.T) {
			p := compilePart(t, streamPart(t, 300, 257, o.yaml))
			defer p.Close()
			s, why := NewStreamer(p, DefaultStreamChunk)
			if s == nil {
				t.Fatal(why)
			}
			n := s.Grad().Elems
			grad := randomGrad(rand.New(rand.NewPCG(1, 1)), n)
			sizes := append(fixedSizes(n/2, 1000), fixedSizes(n-n/2, 65536)...)
			scratch := make([]float32, 65536)
			rt := &Runtime{Ctx: context.Background(), PS: &streamComm{}}
			allocs := testing.AllocsPerRun(10, func() {
				if err := streamStep(s, rt, grad, sizes, scratch); err != nil {
					t.Fatal(err)
				}
				rt.StepNum++
			})
			if allocs != 0 {
				t.Fatalf("%.1f allocations per streamed step, want 0", allocs)
			}
		})
	}
}

// BenchmarkStreamingUpdate compares one step of a 4096x4096 block's
// update (64 MiB) run as a Program (the gradient already in place; Comm
// does nothing) with the same step streamed in 256 KiB chunks.
func BenchmarkStreamingUpdate(b *testing.B) {
	const rows, cols, chunk = 4096, 4096, 256 << 10 / 4
	for _, o := range streamOptimizers {
		if o.name != "sgd" && o.name != "adam" {
			continue
		}
		b.Run(o.name, func(b *testing.B) {
			p := compilePart(b, streamPart(b, rows, cols, o.yaml))
			defer p.Close()
			s, why := NewStreamer(p, DefaultStreamChunk)
			if s == nil {
				b.Fatal(why)
			}
			grad := randomGrad(rand.New(rand.NewPCG(1, 2)), rows*cols)
			gt := p.Scope["W@GRAD"]
			rt := &Runtime{Ctx: context.Background(), PS: &streamComm{}}
			var normal, streamed time.Duration
			var normalB, streamedB uint64
			var m0, m1 runtime.MemStats
			b.ReportAllocs()
			b.ResetTimer()
			for k := 0; k < b.N; k++ {
				rt.StepNum = int64(k)
				// In-place ops may have overwritten the gradient buffer
				// (sgd's step reuses it): put the gradient back, untimed.
				b.StopTimer()
				copy(gt.F, grad)
				b.StartTimer()
				runtime.ReadMemStats(&m0)
				t0 := time.Now()
				if err := p.Run(rt); err != nil {
					b.Fatal(err)
				}
				normal += time.Since(t0)
				runtime.ReadMemStats(&m1)
				normalB += m1.TotalAlloc - m0.TotalAlloc

				runtime.ReadMemStats(&m0)
				t0 = time.Now()
				if err := s.Begin(rt); err != nil {
					b.Fatal(err)
				}
				for off := 0; off < len(grad); off += chunk {
					if err := s.Chunk(off, grad[off:min(off+chunk, len(grad))]); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.End(rt); err != nil {
					b.Fatal(err)
				}
				streamed += time.Since(t0)
				runtime.ReadMemStats(&m1)
				streamedB += m1.TotalAlloc - m0.TotalAlloc
			}
			b.ReportMetric(normal.Seconds()*1e3/float64(b.N), "normal-ms/step")
			b.ReportMetric(streamed.Seconds()*1e3/float64(b.N), "stream-ms/step")
			b.ReportMetric(float64(normalB)/float64(b.N), "normal-B/step")
			b.ReportMetric(float64(streamedB)/float64(b.N), "stream-B/step")
			b.ReportMetric(float64(tempBytes(p.Scope, PersistentOf(p)))/(1<<20), "normal-temp-MiB")
			b.ReportMetric(float64(s.tempBytes())/(1<<10), "stream-temp-KiB")
		})
	}
}

// tempBytes is the memory of a scope's temporaries: distinct buffers not
// held by a persistent variable.
func tempBytes(scope, persistent Scope) int {
	seen := map[*float32]bool{}
	for _, t := range persistent {
		if len(t.F) > 0 {
			seen[&t.F[0]] = true
		}
	}
	n := 0
	for _, t := range scope {
		if len(t.F) > 0 && !seen[&t.F[0]] {
			seen[&t.F[0]] = true
			n += 4 * cap(t.F)
		}
	}
	return n
}

// tempBytes is the memory the streamer's pieces use besides the part's own
// tensors.
func (s *Streamer) tempBytes() int {
	n := 4 * cap(s.carry)
	for _, t := range s.temps {
		n += 4 * cap(t.buf)
	}
	return n
}
