package program

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
)

// fusedModel writes a file of batch-256 rows of four int64 keys (a skewed
// draw from 3,000, repeated within rows and batches, so that their
// gradients add, some nearly cancelling) and returns a model reading them
// through a dynamic table of dim with optimizer opt.
func fusedModel(t *testing.T, dim int, opt string) *dsl.Graph {
	t.Helper()
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(5, 6))
	var b strings.Builder
	for range 256 * 8 {
		fmt.Fprintf(&b, "%d", r.IntN(2))
		for range 4 {
			u := r.Float64()
			fmt.Fprintf(&b, ",%d", int64(u*u*3000))
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, "d.csv"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf(`psgraph: 1
name: fused
data:
  csv: d.csv
  label: {name: y, column: 0}
  ids: {name: keys, columns: [1, 5], key: int64}
params:
  emb: {dynamic: {dim: %d}, init: {type: normal, std: 0.1, seed: 7}}
  W: {shape: [%d, 2], init: {type: normal, std: 0.1, seed: 8}}
ops:
  - {type: lookup_table, inputs: [emb, keys], outputs: [e3]}
  - {type: reshape, inputs: [e3], outputs: [e], attrs: {shape: [-1, %d]}}
  - {type: matmul, inputs: [e, W], outputs: [logits]}
  - {type: softmax_cross_entropy, inputs: [logits, y], outputs: [loss]}
train: {loss: loss, batch: 256, steps: 8, optimizer: %s}
`, dim, 4*dim, 4*dim, opt)
	file := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := dsl.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The fused update of a dynamic table (dynUpdate: gather, element-wise
// optimizer and scatter chunk by chunk) leaves the table bit for bit as
// the ops run one by one over all the step's rows (KeepTemps turns the
// fusion off), for every built-in optimizer, a learning-rate schedule (a
// scalar input from outside the fused ops), row widths that leave tails
// to the vector kernels, and steps of several chunks and a partial one
// (the test checks that each step holds more rows than a chunk, and not a whole number of chunks). It also
// checks that the fusion took place, and that a fused step
// allocates nothing.
func TestDynUpdateFusedIsBitwiseUnfused(t *testing.T) {
	for _, c := range []struct {
		name string
		dim  int
		opt  string
	}{
		{"adagrad", 16, "{type: adagrad, lr: 0.1}"},
		{"adagrad", 5, "{type: adagrad, lr: 0.1}"},
		{"adam", 7, "{type: adam, lr: 0.01}"},
		{"adamw", 5, "{type: adamw, lr: 0.01}"},
		{"ftrl", 3, "{type: ftrl, lr: 0.1}"},
		{"momentum", 5, "{type: momentum, lr: 0.1}"},
		{"sgd", 9, "{type: sgd, lr: {schedule: cosine, value: 0.1, steps: 8, warmup: 2}}"},
		// row_mean is not element-wise: it runs before the fused ops over
		// all the rows, and they read its output (one float a row) a chunk
		// at a time
		{"rowwise_adagrad", 5, "{type: rowwise_adagrad, lr: 0.1}"},
		// a template of scales with both a factor and a bias (the vector
		// kernel's body rounds a*x+b once, its tail twice) and $step, a
		// scalar computed outside the fused ops
		{"template", 5, `{lr: 0.05, mu: 0.9, state: {velocity: {init: zeros}}, update: [
    {type: scale, inputs: [$velocity], outputs: [vd], attrs: {factor: $mu, bias: 0.001}},
    {type: add, inputs: [vd, $grad], outputs: [v_new]},
    {type: scale, inputs: [$step], outputs: [w], attrs: {factor: 0.3, bias: 0.7}},
    {type: mul, inputs: [v_new, w], outputs: [vw]},
    {type: scale, inputs: [vw], outputs: [step], attrs: {factor: $lr, bias: -0.0001}},
    {type: sub, inputs: [$param, step], outputs: [p_new]}],
  assign: {$velocity: v_new, $param: p_new}}`},
	} {
		t.Run(fmt.Sprintf("%s,dim=%d", c.name, c.dim), func(t *testing.T) {
			g := fusedModel(t, c.dim, c.opt)
			fused := compileFused(t, g, CompileOptions{Batch: 256})
			plain := compileFused(t, g, CompileOptions{Batch: 256, KeepTemps: true})
			if countFused(fused) != 1 || countFused(plain) != 0 {
				t.Fatalf("fused updates: %d in the program, %d with KeepTemps; want 1 and 0", countFused(fused), countFused(plain))
			}
			loaded, err := data.LoadSplit(g.Data, nil)
			if err != nil {
				t.Fatal(err)
			}
			set := loaded.Train
			for _, p := range []*Program{fused, plain} {
				st, f := data.NewOrderedStream(set), NewFeeder(g, p.Scope)
				rt := &Runtime{Ctx: context.Background()}
				step := func(k int) {
					if err := f.Fill(st, int64(k*256)); err != nil {
						t.Fatal(err)
					}
					rt.StepNum = int64(k)
					if err := p.Run(rt); err != nil {
						t.Fatalf("step %d: %v", k, err)
					}
				}
				for k := range 8 {
					step(k)
					n, chunk := len(p.Scope["emb@rows"].Rows.IDs), dynChunkRows(c.dim)
					if n <= chunk || n%chunk == 0 {
						t.Fatalf("step %d: %d rows, chunks of %d: want several chunks and a partial one", k, n, chunk)
					}
				}
				// Allocations are averaged over eight steps (the second pass
				// over the file: its keys all have rows, so the table does
				// not grow), floored as AllocsPerRun does: a GEMM scratch
				// buffer taken fresh when two of the step's products first
				// run at once, on the scheduler's two goroutines, is a
				// one-off, not a per-step cost.
				k := 8
				if a := testing.AllocsPerRun(8, func() { step(k); k++ }); p == fused && a != 0 {
					t.Errorf("a fused step allocates %v times", a)
				}
			}
			fk, fr, err := tableTensors(fused.Tables["emb"])
			if err != nil {
				t.Fatal(err)
			}
			pk, pr, err := tableTensors(plain.Tables["emb"])
			if err != nil {
				t.Fatal(err)
			}
			if len(fk.L) != len(pk.L) || len(fr.F) != len(pr.F) || len(fk.L) < 1000 {
				t.Fatalf("fused: %d keys, %d floats; unfused: %d keys, %d floats (want equal, over 1,000 keys)", len(fk.L), len(fr.F), len(pk.L), len(pr.F))
			}
			w := len(fr.F) / len(fk.L)
			for i, key := range fk.L {
				if pk.L[i] != key {
					t.Fatalf("key %d: fused %d, unfused %d", i, key, pk.L[i])
				}
				for j := range w {
					a, b := fr.F[i*w+j], pr.F[i*w+j]
					if math.Float32bits(a) != math.Float32bits(b) {
						t.Fatalf("key %d column %d: fused %g (%#x), unfused %g (%#x)", key, j, a, math.Float32bits(a), b, math.Float32bits(b))
					}
				}
			}
		})
	}
}

func compileFused(t *testing.T, g *dsl.Graph, opt CompileOptions) *Program {
	t.Helper()
	p, err := Compile(g, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := Init(p, InitOptions{From: ""}); err != nil {
		t.Fatal(err)
	}
	return p
}

// countFused is the number of dyn_scatter nodes of p that run fused: all
// of them when no dyn_gather runs by itself.
func countFused(p *Program) int {
	n := 0
	for _, nd := range p.nodes {
		switch nd.op.Type {
		case "dyn_gather":
			return 0
		case "dyn_scatter":
			n++
		}
	}
	return n
}
