package job

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/exec/trainer"
)

// The zoo models examples/wide-deep.yaml (FTRL on the wide tables beside
// adagrad), multi-hot.yaml (row-wise adagrad on tables read by
// embedding_bag and lookup_table in one hash space) and two-tower.yaml
// (in-batch negatives, adam) at a small size (testdata/zoo-sparse, written
// by its gen_reference.py with the torch references): 50 steps with batch
// 32 locally, and in a 2x2 sync job with batch 16 per trainer, give the
// parameters bench/zoo_sparse_torch.py's torch model gives.
//
// A CTR model's loss is a mean over rows, so the job's two halves are the
// local batch and both runs match one reference. Two-tower's loss is
// batch-coupled: each row's softmax runs over the items of its trainer's
// half, so the job trains another model than local training with the
// whole batch; it is compared with torch doing what a data-parallel torch
// job does, each trainer's loss on its half and the gradients averaged
// (the two references differ by 0.32 relative, testdata/zoo-sparse's
// generator checks that they differ).

const zooDir = "../../testdata/zoo-sparse/"

// zooTol is the tolerance relative to torch's values. The optimizers
// (adagrad, FTRL, row-wise adagrad, adam) divide by roots of accumulated
// squares, which can amplify float32 rounding; measured, every parameter
// ends within 1e-5 of torch's.
const zooTol = 1e-4

func TestWideDeepMatchesTorch(t *testing.T) { matchZooModel(t, "wide-deep") }
func TestMultiHotMatchesTorch(t *testing.T) { matchZooModel(t, "multi-hot") }
func TestTwoTowerMatchesTorch(t *testing.T) { matchZooModel(t, "two-tower") }

func matchZooModel(t *testing.T, name string) {
	g := load(t, zooDir+name+".yaml")
	init := zooDir + name + "-init.safetensors"
	t.Run("local", func(t *testing.T) {
		got := trainGraph(t, g, trainer.RunOptions{Role: "local", Steps: 50, Batch: 32, InitFrom: init})
		matchZooReference(t, got, zooDir+name+"-local.safetensors", init)
	})
	t.Run("2x2", func(t *testing.T) {
		file := runTableJob(t, g, 2, 2, false, trainer.RunOptions{Steps: 50, Batch: 16, InitFrom: init, Log: zerolog.Nop()})
		got, _, err := modelfile.LoadSafetensors(file)
		if err != nil {
			t.Fatal(err)
		}
		matchZooReference(t, got, zooDir+name+"-2x2.safetensors", init)
	})
}

// matchZooReference compares every parameter with torch's: the 2-norm of
// the difference relative to the reference's, and the largest element
// difference relative to its largest value, both within zooTol; and each
// reference moved away from the initial values, so the test discriminates.
func matchZooReference(t *testing.T, got map[string]*tensor.Tensor, ref, init string) {
	t.Helper()
	want, _, err := modelfile.LoadSafetensors(ref)
	if err != nil {
		t.Fatal(err)
	}
	start, _, err := modelfile.LoadSafetensors(init)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 || len(got) != len(want) {
		t.Fatalf("psgraph saved %d tensors, the reference holds %d", len(got), len(want))
	}
	worst := 0.0
	for p, w := range want {
		g := got[p]
		if g == nil || !g.Shape.Equal(w.Shape) {
			t.Fatalf("%s: got %v, want shape %v", p, g, w.Shape)
		}
		l2, m := relDiff(g.F, w.F), maxRelDiff(g.F, w.F)
		worst = max(worst, l2, m)
		if l2 > zooTol || m > zooTol {
			t.Errorf("%s: %.2e (2-norm) and %.2e (largest element) relative to torch, want <= %.0e", p, l2, m, zooTol)
		}
		if relDiff(start[p].F, w.F) < 1e-2 {
			t.Fatalf("%s: the reference barely moved from its initial values; the test would not discriminate", p)
		}
	}
	t.Logf("largest relative difference to torch %.2e", worst)
}

// The small models are the examples: the same ops (types, inputs,
// outputs, and attributes but sizes), data variables and per-parameter
// optimizers, with smaller tables and MLPs. The examples load (and pass
// the shape checks) beside generated data of their format, zoo.tsv.
func TestZooSparseModelsAreTheExamples(t *testing.T) {
	sizes := map[string]bool{"shape": true, "buckets": true}
	dir := t.TempDir()
	rows := mustRead(t, zooDir+"zoo.tsv")
	for _, f := range []string{"fm.tsv", "fm-eval.tsv", "clicks.tsv", "clicks-eval.tsv"} {
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "data", f), []byte(rows), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"wide-deep", "multi-hot", "two-tower"} {
		t.Run(name, func(t *testing.T) {
			ex := sparseModelAt(t, filepath.Join(dir, name+".yaml"), []byte(mustRead(t, "../../examples/"+name+".yaml")))
			small := load(t, zooDir+name+".yaml")
			exOps, smallOps := forwardOps(ex), forwardOps(small)
			if len(exOps) != len(smallOps) {
				t.Fatalf("the example has %d ops, the small model %d", len(exOps), len(smallOps))
			}
			for i, a := range exOps {
				b := smallOps[i]
				if a.Type != b.Type || !reflect.DeepEqual(a.Inputs, b.Inputs) || !reflect.DeepEqual(a.Outputs, b.Outputs) {
					t.Fatalf("op %d: the example's %s %v -> %v, the small model's %s %v -> %v", i, a.Type, a.Inputs, a.Outputs, b.Type, b.Inputs, b.Outputs)
				}
				for k, v := range a.Attrs {
					if !sizes[k] && fmt.Sprint(b.Attrs[k]) != fmt.Sprint(v) {
						t.Errorf("op %d (%s): attribute %s is %v in the example, %v in the small model", i, a.Type, k, v, b.Attrs[k])
					}
				}
			}
			if fmt.Sprint(dataVars(ex)) != fmt.Sprint(dataVars(small)) {
				t.Errorf("data variables: the example's %v, the small model's %v", dataVars(ex), dataVars(small))
			}
			if a, b := optimizers(ex), optimizers(small); a != b {
				t.Errorf("optimizers: the example's %s, the small model's %s", a, b)
			}
		})
	}
}

func forwardOps(g *dsl.Graph) []*dsl.Op {
	var out []*dsl.Op
	for _, op := range g.Ops {
		if op.Section == dsl.Forward {
			out = append(out, op)
		}
	}
	return out
}

// optimizers lists each parameter's optimizer: its own, or train's.
func optimizers(g *dsl.Graph) string {
	var b strings.Builder
	for _, name := range g.Order {
		v := g.Vars[name]
		if v.Kind != dsl.KindParam {
			continue
		}
		o := g.Train.Optimizer
		if v.Optimizer != nil {
			o = v.Optimizer
		}
		fmt.Fprintf(&b, "%s: %s %v; ", name, o.Type, o.Hyper)
	}
	return b.String()
}

func dataVars(g *dsl.Graph) []string {
	var names []string
	for _, c := range g.Data.Columns() {
		names = append(names, c.Name)
	}
	return names
}

// psgraph eval of the two-tower model (no label column: its loss reads
// the rows' own items) with torch's trained parameters gives torch's loss
// and recall@10 over zoo.tsv, evaluated as one chunk of its 200 rows: the
// in-batch softmax over the chunk's items, each counted once, and each
// row's item ranked among the chunk's distinct items.
func TestTwoTowerEvalMatchesTorch(t *testing.T) {
	g := load(t, zooDir+"two-tower.yaml")
	ref := zooDir + "two-tower-local.safetensors"
	_, meta, err := modelfile.LoadSafetensors(ref)
	if err != nil {
		t.Fatal(err)
	}
	res, err := evaluate.EvalModel(context.Background(), g, evaluate.EvalOptions{InitFrom: ref, Data: zooDir + "zoo.tsv", Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	wantLoss, err1 := strconv.ParseFloat(meta["eval_loss"], 64)
	wantRecall, err2 := strconv.ParseFloat(meta["eval_recall10"], 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("the reference's metadata %v", meta)
	}
	t.Logf("rows %d: loss %.6f (torch %.6f), recall@10 %.4f (torch %.4f)", res.Rows, res.Loss, wantLoss, res.Metrics["recall10"], wantRecall)
	if res.Rows != 200 || math.Abs(res.Loss-wantLoss) > 1e-4*wantLoss || math.Abs(res.Metrics["recall10"]-wantRecall) > 1e-6 {
		t.Errorf("eval gave %d rows, loss %v and recall@10 %v; torch %v and %v over 200 rows", res.Rows, res.Loss, res.Metrics["recall10"], wantLoss, wantRecall)
	}
	if wantRecall <= 0.1 || wantRecall >= 0.99 {
		t.Fatalf("torch's recall@10 %v is too near a bound to tell", wantRecall)
	}
}

// A local step of each zoo model allocates nothing: the hashed crosses,
// FTRL on the tables, the pooled history, the in-batch softmax with its
// duplicate counts and recall@10.
func TestZooSparseStepsDoNotAllocate(t *testing.T) {
	for _, name := range []string{"wide-deep", "multi-hot", "two-tower"} {
		g := load(t, zooDir+name+".yaml")
		p, err := program.Compile(g, program.CompileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := program.Init(p, program.InitOptions{From: zooDir + name + "-init.safetensors"}); err != nil {
			t.Fatal(err)
		}
		feed := newTestFeed(t, g, p)
		rt := &program.Runtime{Ctx: context.Background()}
		k := 0
		allocs := testing.AllocsPerRun(20, func() {
			feed(k)
			rt.StepNum = int64(k + 1)
			if err := p.Run(rt); err != nil {
				t.Fatal(err)
			}
			k++
		})
		p.Close()
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per step, want 0", name, allocs)
		}
	}
}
