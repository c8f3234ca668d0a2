package job

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/exec/trainer"
)

// The optimizers on a lookup table whose duplicate ids nearly cancel:
// testdata/sparse/cancel-*.yaml read cancel.csv, where an id in columns 0
// and 1 of a row gets two gradients summing to about 1e-7, and pair ids
// only ever get such sums (testdata/sparse/gen_reference.py). The
// references are torch's (SGD, Adagrad, SparseAdam, SparseAdam with the
// decoupled decay of the touched rows for adamw; Adam and AdamW for the
// dense W) and independent numpy implementations of TF's FTRL and FBGEMM's
// row-wise adagrad fed with torch's gradients.

const cancelInit = "../../testdata/sparse/cancel-init.safetensors"

// maxRelDiff is the largest element difference relative to the largest
// reference value: a few rows gone wrong show in it, where relDiff (the
// 2-norm over the whole tensor) dilutes them.
func maxRelDiff(got, want []float32) float64 {
	var d, m float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-float64(want[i])))
		m = math.Max(m, math.Abs(float64(want[i])))
	}
	return d / math.Max(m, 1e-30)
}

// matchCancelReference compares got with testdata/sparse/cancel-<name>:
// every element within tol of the largest value, and the reference moved
// away from the initial values (so the comparison discriminates).
func matchCancelReference(t *testing.T, name string, got map[string]*tensor.Tensor, tol float64) {
	t.Helper()
	want, _, err := modelfile.LoadSafetensors("../../testdata/sparse/cancel-" + name + ".safetensors")
	if err != nil {
		t.Fatal(err)
	}
	init, _, err := modelfile.LoadSafetensors(cancelInit)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"emb", "W"} {
		g, w := got[p], want[p]
		if g == nil || !g.Shape.Equal(w.Shape) {
			t.Fatalf("%s: got %v, want shape %v", p, g, w.Shape)
		}
		m, l2 := maxRelDiff(g.F, w.F), relDiff(g.F, w.F)
		t.Logf("%s: largest element difference %.2e of the largest value, 2-norm relative difference %.2e", p, m, l2)
		if m > tol || l2 > tol {
			t.Errorf("%s: difference to the reference %.2e (largest element) and %.2e (2-norm) relative, want <= %.0e", p, m, l2, tol)
		}
		if maxRelDiff(init[p].F, w.F) < 1e-2 {
			t.Fatalf("%s: reference barely moved from init; the test would not discriminate", p)
		}
	}
}

// Every built-in optimizer on the cancelling table, 50 local steps, ends
// within 1e-3 (of the largest value, element by element) of its reference:
// adam as torch.optim.SparseAdam (the dense W as torch.optim.Adam), adamw
// as SparseAdam with the touched rows decayed, ftrl as TF's sparse FTRL
// (with l1, l2, beta; and with lr_power -0.7), rowwise_adagrad as FBGEMM's,
// and mixed: params.emb.optimizer ftrl beside train.optimizer adam.
func TestTableOptimizersMatchReferences(t *testing.T) {
	for _, name := range []string{"sgd", "adagrad", "adam", "adamw", "ftrl", "ftrl-power", "rowwise_adagrad", "mixed"} {
		t.Run(name, func(t *testing.T) {
			g := load(t, "../../testdata/sparse/cancel-"+name+".yaml")
			if !g.Types["emb@GRAD"].Sparse() {
				t.Fatalf("emb@GRAD is %v, want a row gradient", g.Types["emb@GRAD"])
			}
			_, got := train(t, "../../testdata/sparse/cancel-"+name+".yaml", trainer.RunOptions{Role: "local", InitFrom: cancelInit})
			matchCancelReference(t, name, got, 1e-3)
		})
	}
}

// The data tells the two forms of Adam apart: torch.optim.Adam's form on
// the touched rows (sqrt(v_hat) + eps, what psgraph's tables used before,
// written here as a template without a sparse form) ends far from
// SparseAdam's reference, the built-in adam within 1e-3 of it.
func TestTableAdamDenseFormIsNotSparseAdam(t *testing.T) {
	src := mustRead(t, "../../testdata/sparse/cancel-adam.yaml")
	dense := strings.Replace(src, "optimizer: {type: adam, lr: 0.01}", `optimizer:
    lr: 0.01
    state:
      m: {init: zeros}
      v: {init: zeros}
      beta1_pow: {shape: [], init: {type: constant, value: 1}}
      beta2_pow: {shape: [], init: {type: constant, value: 1}}
    update:
      - {type: scale, inputs: [$m], outputs: [m_decay], attrs: {factor: 0.9}}
      - {type: scale, inputs: [$grad], outputs: [g_part], attrs: {factor: 0.1}}
      - {type: add, inputs: [m_decay, g_part], outputs: [m_new]}
      - {type: mul, inputs: [$grad, $grad], outputs: [g2]}
      - {type: scale, inputs: [$v], outputs: [v_decay], attrs: {factor: 0.999}}
      - {type: scale, inputs: [g2], outputs: [g2_part], attrs: {factor: 0.001}}
      - {type: add, inputs: [v_decay, g2_part], outputs: [v_new]}
      - {type: scale, inputs: [$beta1_pow], outputs: [b1p_new], attrs: {factor: 0.9}}
      - {type: scale, inputs: [$beta2_pow], outputs: [b2p_new], attrs: {factor: 0.999}}
      - {type: scale, inputs: [b1p_new], outputs: [c1], attrs: {factor: -1, bias: 1}}
      - {type: scale, inputs: [b2p_new], outputs: [c2], attrs: {factor: -1, bias: 1}}
      - {type: sqrt, inputs: [c2], outputs: [c2_sqrt]}
      - {type: sqrt, inputs: [v_new], outputs: [v_sqrt]}
      - {type: div, inputs: [v_sqrt, c2_sqrt], outputs: [v_hat_sqrt]}
      - {type: scale, inputs: [v_hat_sqrt], outputs: [denom], attrs: {bias: 1.0e-8}}
      - {type: div, inputs: [m_new, denom], outputs: [ratio]}
      - {type: div, inputs: [ratio, c1], outputs: [direction]}
      - {type: scale, inputs: [direction], outputs: [step], attrs: {factor: $lr}}
      - {type: sub, inputs: [$param, step], outputs: [p_new]}
    assign: {$m: m_new, $v: v_new, $beta1_pow: b1p_new, $beta2_pow: b2p_new, $param: p_new}`, 1)
	if dense == src {
		t.Fatal("the model's optimizer line changed; update the test")
	}
	got := trainGraph(t, sparseModelAt(t, "../../testdata/sparse/cancel-adam.yaml", []byte(dense)), trainer.RunOptions{Role: "local", InitFrom: cancelInit})
	want, _, err := modelfile.LoadSafetensors("../../testdata/sparse/cancel-adam.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	d := maxRelDiff(got["emb"].F, want["emb"].F)
	t.Logf("torch.optim.Adam's form on the table ends %.3f (of the largest value) from SparseAdam", d)
	if d < 1e-2 {
		t.Errorf("the dense form ends within %.2e of SparseAdam's reference: the data does not tell the forms apart", d)
	}
}

// A 2x1 sync job (2 trainers x batch 8, the references' batch 16) on the
// cancelling table ends within 1e-3 of the references too: the pserver
// runs each parameter's own optimizer on its shard.
func TestShardedTableOptimizersMatchReferences(t *testing.T) {
	for _, name := range []string{"adam", "adamw", "ftrl", "rowwise_adagrad", "mixed"} {
		t.Run(name, func(t *testing.T) {
			g := load(t, "../../testdata/sparse/cancel-"+name+".yaml")
			file := runTableJob(t, g, 2, 1, false, trainer.RunOptions{Steps: 50, Batch: 8, InitFrom: cancelInit, Log: zerolog.Nop()})
			got, _, err := modelfile.LoadSafetensors(file)
			if err != nil {
				t.Fatal(err)
			}
			matchCancelReference(t, name, got, 1e-3)
		})
	}
}

// A 2x2 job shards the table over both pservers (row-wise adagrad's
// [V, 1] accumulator with it) and places W on one: with FTRL on the table
// and adam on W (params.emb.optimizer), with row-wise adagrad, and with
// FTRL throughout, it equals local training with the combined batch.
func TestShardedTableOptimizersEqualLocalInmem(t *testing.T) {
	for _, name := range []string{"mixed", "rowwise_adagrad", "ftrl-power", "adamw"} {
		t.Run(name, func(t *testing.T) {
			g := load(t, "../../testdata/sparse/cancel-"+name+".yaml")
			local := trainGraph(t, g, trainer.RunOptions{Role: "local", Steps: 30, Batch: 16, InitFrom: cancelInit})
			file := runTableJob(t, g, 2, 2, false, trainer.RunOptions{Steps: 30, Batch: 8, InitFrom: cancelInit, Log: zerolog.Nop()})
			dist, _, err := modelfile.LoadSafetensors(file)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"emb", "W"} {
				d := maxRelDiff(dist[p].F, local[p].F)
				t.Logf("%s: 2x2 against local %.2e", p, d)
				if d > 1e-4 {
					t.Errorf("%s: the 2x2 job ends %.2e (of the largest value) from local training", p, d)
				}
			}
		})
	}
}

// On a table every optimizer is lazy: after 3 steps of the cancelling
// data a row no batch touched keeps its value and every state of its rows
// (FTRL's accumulator at initial_accumulator_value and linear at 0,
// row-wise adagrad's one accumulator, adam's moments) as initialized,
// while every touched row moved; row-wise adagrad keeps one value per row
// ([50, 1]); adam's and adamw's bias corrections count every step of the
// parameter (bias1 = 1 - 0.9^3), touched or not, as SparseAdam's step does.
func TestTableOptimizersAreLazy(t *testing.T) {
	for _, name := range []string{"adam", "adamw", "ftrl", "rowwise_adagrad", "mixed"} {
		t.Run(name, func(t *testing.T) {
			g := load(t, "../../testdata/sparse/cancel-"+name+".yaml")
			p, err := program.Compile(g, program.CompileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if err := program.Init(p, program.InitOptions{From: cancelInit}); err != nil {
				t.Fatal(err)
			}
			var rowState []string
			for _, v := range g.Vars {
				if v.Of == "emb" && len(v.Shape) == 2 {
					rowState = append(rowState, v.Name)
				}
			}
			if len(rowState) != 2 && name != "rowwise_adagrad" || len(rowState) != 1 && name == "rowwise_adagrad" {
				t.Fatalf("emb's row states are %v", rowState)
			}
			before := map[string][]float32{"emb": append([]float32{}, p.Scope["emb"].F...)}
			for _, s := range rowState {
				before[s] = append([]float32{}, p.Scope[s].F...)
			}
			feed := newTestFeed(t, g, p)
			touched := map[int32]bool{}
			const steps = 3
			for k := 0; k < steps; k++ {
				feed(k)
				for _, id := range p.Scope["ids"].I {
					touched[id] = true
				}
				if err := p.Run(&program.Runtime{Ctx: context.Background(), StepNum: int64(k + 1)}); err != nil {
					t.Fatal(err)
				}
			}
			moved, kept := 0, 0
			for r := 0; r < 50; r++ {
				same := func(n string) bool {
					w := p.Scope[n].RowWidth()
					for j := r * w; j < (r+1)*w; j++ {
						if p.Scope[n].F[j] != before[n][j] {
							return false
						}
					}
					return true
				}
				if touched[int32(r)] {
					if same("emb") {
						t.Errorf("row %d was touched but did not move", r)
					}
					moved++
					continue
				}
				for n := range before {
					if !same(n) {
						t.Errorf("row %d was never touched but %s changed", r, n)
					}
				}
				kept++
			}
			if moved == 0 || kept == 0 {
				t.Fatalf("moved %d rows, kept %d: the data must touch some rows and not others", moved, kept)
			}
			switch name {
			case "ftrl", "mixed":
				for i, v := range p.Scope["emb@accumulator"].F {
					if r := int32(i / 4); !touched[r] && v != float32(0.1) {
						t.Fatalf("untouched row %d's accumulator is %v, want initial_accumulator_value 0.1", r, v)
					}
				}
			case "rowwise_adagrad":
				if s := p.Scope["emb@sum"].Shape; !s.Equal([]int{50, 1}) {
					t.Fatalf("emb@sum has shape %v, want [50, 1]", s)
				}
			case "adam", "adamw":
				if b := p.Scope["emb@bias1"].F[0]; math.Abs(float64(b)-(1-math.Pow(0.9, steps))) > 1e-6 {
					t.Fatalf("emb@bias1 is %v after %d steps, want 1 - 0.9^%d", b, steps, steps)
				}
			}
		})
	}
}

// A local step of the new optimizers, on a table (with adam's sparse form,
// and FTRL beside adam) and on dense parameters, allocates nothing, as the
// others' do.
func TestNewOptimizerStepDoesNotAllocate(t *testing.T) {
	var models [][2]string
	for _, name := range []string{"adam", "adamw", "ftrl", "ftrl-power", "rowwise_adagrad", "mixed"} {
		models = append(models, [2]string{"../../testdata/sparse/cancel-" + name + ".yaml", cancelInit})
	}
	for _, name := range []string{"ftrl", "ftrl-exponential", "rowwise_adagrad", "mixed"} {
		models = append(models, [2]string{"../../testdata/optim/mlp-" + name + ".yaml", "../../testdata/optim/init.safetensors"})
	}
	for _, m := range models {
		g := load(t, m[0])
		p, err := program.Compile(g, program.CompileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := program.Init(p, program.InitOptions{From: m[1]}); err != nil {
			t.Fatal(err)
		}
		feed := newTestFeed(t, g, p)
		rt := &program.Runtime{Ctx: context.Background()}
		k := 0
		allocs := testing.AllocsPerRun(50, func() {
			feed(k)
			rt.StepNum = int64(k + 1)
			if err := p.Run(rt); err != nil {
				t.Fatal(err)
			}
			k++
		})
		p.Close()
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per step, want 0", m[0], allocs)
		}
	}
}

// An element-wise op of a table's update may take a value of one per row
// ([V, 1] rows) before the [V, D] rows: the result holds [V, D] rows
// either way, and the two orders of a multiplication end bit for bit
// together.
func TestTableUpdateBroadcastsPerRowValuesEitherSide(t *testing.T) {
	src := mustRead(t, "../../testdata/sparse/cancel-rowwise_adagrad.yaml")
	template := func(mul string) string {
		return strings.Replace(src, "optimizer: {type: rowwise_adagrad, lr: 0.1}", `optimizer:
    lr: 0.1
    state: {sum: {shape: rows}}
    update:
      - {type: mul, inputs: [$grad, $grad], outputs: [g2]}
      - {type: row_mean, inputs: [g2], outputs: [g2_mean]}
      - {type: add, inputs: [$sum, g2_mean], outputs: [sum_new]}
      - {type: sqrt, inputs: [sum_new], outputs: [std]}
      - {type: scale, inputs: [std], outputs: [denom], attrs: {bias: 1.0e-8}}
      - {type: pow, inputs: [denom], outputs: [inv], attrs: {exponent: -1}}
      - `+mul+`
      - {type: scale, inputs: [ratio], outputs: [step], attrs: {factor: $lr}}
      - {type: sub, inputs: [$param, step], outputs: [p_new]}
    assign: {$sum: sum_new, $param: p_new}`, 1)
	}
	path := "../../testdata/sparse/cancel-rowwise_adagrad.yaml"
	a := sparseModelAt(t, path, []byte(template("{type: mul, inputs: [$grad, inv], outputs: [ratio]}")))
	b := sparseModelAt(t, path, []byte(template("{type: mul, inputs: [inv, $grad], outputs: [ratio]}")))
	if ty := b.Types["emb@ratio"]; !ty.Sparse() || !ty.Shape.Equal([]int{50, 4}) {
		t.Fatalf("emb@ratio is %v, want [50, 4] rows", ty)
	}
	opt := trainer.RunOptions{Role: "local", InitFrom: cancelInit, Steps: 20}
	sameParams(t, "either order", trainGraph(t, a, opt), trainGraph(t, b, opt))
}
