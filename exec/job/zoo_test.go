package job

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data/criteo"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/exec/trainer"
)

// The model zoo against torch: examples/dlrm.yaml, dcn-v2.yaml and
// deepfm.yaml, each as written but for its data file and with every table
// of 100,000 rows (and its hash_buckets) made 100, train 50 steps of batch
// 128 on `psgraph gen criteo --rows 2000 --truth fm` from one initial
// model, locally and as a 2x2 sync job with batch 64 per trainer (the
// tables sharded over both pservers), and end where the same models
// written in torch end (bench/zoo_torch.py; references by
// testdata/zoo/gen_reference.py): every parameter within 1e-4 relative
// for DLRM's sgd, 1e-3 for adagrad (DCN-v2, DeepFM), whose divisions by
// small accumulators amplify float32 rounding. Ids of a column repeat
// within every batch (128 ids over 100 rows), so the tables' row gradients
// sum duplicates. The generator picks each model's data seed so that
// float32 rounding alone does not move torch's result (its docstring says
// why some data is chaotic); the seed is in the reference's metadata.
func TestZooMatchesTorch(t *testing.T) {
	for _, c := range []struct {
		model string
		tol   float64
	}{{"dlrm", 1e-4}, {"dcn-v2", 1e-3}, {"deepfm", 1e-3}} {
		t.Run(c.model, func(t *testing.T) {
			want, meta, err := modelfile.LoadSafetensors("../../testdata/zoo/" + c.model + ".safetensors")
			if err != nil {
				t.Fatal(err)
			}
			var seed uint64
			if _, err := fmt.Sscan(meta["seed"], &seed); err != nil {
				t.Fatalf("the reference's seed %q: %v", meta["seed"], err)
			}
			dir := t.TempDir()
			var buf bytes.Buffer
			if _, err := criteo.Generate(&buf, criteo.Options{Rows: 2000, Seed: seed, Truth: "fm"}); err != nil {
				t.Fatal(err)
			}
			if sum := sha256.Sum256(buf.Bytes()); meta["data_sha256"] != hex.EncodeToString(sum[:]) {
				t.Fatalf("the generated data is not the reference's (sha256 %x, reference %s): gen criteo changed; run testdata/zoo/gen_reference.py", sum, meta["data_sha256"])
			}
			if err := os.WriteFile(filepath.Join(dir, "zoo.tsv"), buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			g := zooModel(t, c.model, dir)
			init := filepath.Join(dir, "init.safetensors")
			initial := zooInit(t, g, init)
			local := trainGraph(t, g, trainer.RunOptions{Role: "local", Steps: 50, Batch: 128, InitFrom: init})
			matchZoo(t, "local", local, want, initial, c.tol)
			file := runTableJob(t, g, 2, 2, false, trainer.RunOptions{Steps: 50, Batch: 64, InitFrom: init, Log: zerolog.Nop()})
			dist, _, err := modelfile.LoadSafetensors(file)
			if err != nil {
				t.Fatal(err)
			}
			matchZoo(t, "2x2", dist, want, initial, c.tol)
		})
	}
}

// zooModel writes examples/<model>.yaml into dir with its data file
// dir/zoo.tsv, no held-out file, and tables of 100 rows.
func zooModel(t *testing.T, model, dir string) *dsl.Graph {
	t.Helper()
	src := mustRead(t, "../../examples/"+model+".yaml")
	for _, r := range [][2]string{{"csv: data/zoo-train.tsv", "csv: zoo.tsv"}, {"  eval: {csv: data/zoo-eval.tsv}\n", ""}, {"100000", "100"}} {
		if !strings.Contains(src, r[0]) {
			t.Fatalf("examples/%s.yaml has no %q; update the test", model, r[0])
		}
		src = strings.ReplaceAll(src, r[0], r[1])
	}
	path := filepath.Join(dir, model+".yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return load(t, path)
}

// zooInit writes g's initial parameters to path, computed from their
// names as testdata/zoo/gen_reference.py computes them: element i of
// parameter P is scale * (2u - 1), u = splitmix64(fnv1a64(P) + i) >> 11
// over 2^53, scale sqrt(6 / (rows + columns)) for a matrix and 0.1 for a
// vector.
func zooInit(t *testing.T, g *dsl.Graph, path string) map[string]*tensor.Tensor {
	t.Helper()
	out := map[string]*tensor.Tensor{}
	for _, name := range g.Params() {
		shape := tensor.Shape(g.Vars[name].Shape)
		x := tensor.New(tensor.F32, shape)
		h := fnv.New64a()
		h.Write([]byte(name))
		seed := h.Sum64()
		scale := 0.1
		if len(shape) == 2 {
			scale = math.Sqrt(6 / float64(shape[0]+shape[1]))
		}
		for i := range x.F {
			z := seed + uint64(i) + 0x9e3779b97f4a7c15
			z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
			z = (z ^ z>>27) * 0x94d049bb133111eb
			z ^= z >> 31
			u := float64(z>>11) / (1 << 53)
			x.F[i] = float32(scale * (2*u - 1))
		}
		out[name] = x
	}
	if err := modelfile.SaveSafetensors(path, out, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

// matchZoo checks every parameter of want against got (relDiff, the
// 2-norm of the difference over the reference's) and that the reference
// moved away from the initial model, so the comparison discriminates.
func matchZoo(t *testing.T, what string, got, want, initial map[string]*tensor.Tensor, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d parameters, the reference %d", what, len(got), len(want))
	}
	worst, worstName, step, stepName := 0.0, "", 0.0, ""
	for name, w := range want {
		g := got[name]
		if g == nil || !g.Shape.Equal(w.Shape) {
			t.Fatalf("%s: %s is %v, the reference's shape %v", what, name, g, w.Shape)
		}
		if d := relDiff(initial[name].F, w.F); d < 5*tol {
			t.Fatalf("%s: the reference moved %.2g from the initial value; the test would not discriminate", name, d)
		}
		d := relDiff(g.F, w.F)
		if d > tol {
			t.Errorf("%s: %s differs from torch's by %.2g relative, want <= %.0g", what, name, d, tol)
		}
		if d > worst {
			worst, worstName = d, name
		}
		// the same relative to the parameter's change over the 50 steps
		dg, dw := make([]float32, len(w.F)), make([]float32, len(w.F))
		for i := range dw {
			dg[i], dw[i] = g.F[i]-initial[name].F[i], w.F[i]-initial[name].F[i]
		}
		if d := relDiff(dg, dw); d > step {
			step, stepName = d, name
		}
	}
	t.Logf("%s: largest relative difference %.2g (%s); relative to the change of the parameter over the steps %.2g (%s)", what, worst, worstName, step, stepName)
}
