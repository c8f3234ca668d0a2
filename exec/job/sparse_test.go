package job

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/trainer"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/tensor"
)

// An embedding table read only through lookup_table gets a row gradient,
// and the optimizer runs on the touched rows; the result is torch's sparse
// path (nn.functional.embedding(sparse=True) with SGD, Adagrad, and
// SparseAdam for the table) from the same initial parameters and data
// (testdata/sparse/gen_reference.py wrote the references).
func TestSparseTableMatchesTorch(t *testing.T) {
	for _, name := range []string{"sgd", "adagrad", "adam"} {
		t.Run(name, func(t *testing.T) {
			g := load(t, "../../testdata/sparse/emb-"+name+".yaml")
			if ty := g.Types[dsl.GradName("emb")]; !ty.Sparse() {
				t.Fatalf("emb@GRAD is %v, want a row gradient", ty)
			}
			_, got := train(t, "../../testdata/sparse/emb-"+name+".yaml", trainer.RunOptions{Role: "local", InitFrom: "../../testdata/sparse/init.safetensors"})
			want, _, err := modelfile.LoadSafetensors("../../testdata/sparse/" + name + ".safetensors")
			if err != nil {
				t.Fatal(err)
			}
			init, _, _ := modelfile.LoadSafetensors("../../testdata/sparse/init.safetensors")
			for p, w := range want {
				if d := relDiff(got[p].F, w.F); d > 1e-3 {
					t.Errorf("%s: relative difference to torch %.2e > 1e-3", p, d)
				}
				if relDiff(init[p].F, w.F) < 1e-2 {
					t.Fatalf("%s: reference barely moved from init; the test would not discriminate", p)
				}
			}
		})
	}
}

// densify rewrites a differentiated graph so that the table's gradient is
// the dense scatter-add (to_dense of the row gradient): the reference the
// row-wise update must equal.
func densify(t *testing.T, path, param string) *dsl.Graph {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := dsl.Parse(path, src)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Differentiate(); err != nil {
		t.Fatal(err)
	}
	grad := dsl.GradName(param)
	for _, op := range g.Ops {
		if op.Outputs[0] == grad {
			op.Outputs[0] = grad + ".rows"
		}
	}
	g.Ops = append(g.Ops, &dsl.Op{Type: "to_dense", Inputs: []string{grad + ".rows"}, Outputs: []string{grad}, Attrs: ops.Attrs{}, Section: dsl.Backward})
	if err := g.ExpandOptimizer(); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(); err != nil {
		t.Fatal(err)
	}
	if g.Types[grad].Sparse() {
		t.Fatal("densify left the gradient row-sparse")
	}
	return g
}

// sgd, adagrad and a user-written template (momentum without state-reading
// ops beyond element-wise) update a table row by row with exactly the
// dense result for sgd and adagrad: bit for bit, untouched rows unchanged
// either way.
func TestSparseUpdateEqualsDense(t *testing.T) {
	for _, name := range []string{"sgd", "adagrad"} {
		t.Run(name, func(t *testing.T) {
			path := "../../testdata/sparse/emb-" + name + ".yaml"
			init, _, err := modelfile.LoadSafetensors("../../testdata/sparse/init.safetensors")
			if err != nil {
				t.Fatal(err)
			}
			run := func(g *dsl.Graph) map[string]*tensor.Tensor {
				p, err := program.Compile(g, program.CompileOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				for n, v := range init {
					p.Scope[n].CopyFrom(v)
				}
				feed := newTestFeed(t, g, p)
				for k := 0; k < 50; k++ {
					feed(k)
					if err := p.Run(&program.Runtime{Ctx: context.Background()}); err != nil {
						t.Fatal(err)
					}
				}
				return map[string]*tensor.Tensor{"emb": p.Scope["emb"], "W": p.Scope["W"]}
			}
			sparse, dense := run(load(t, path)), run(densify(t, path, "emb"))
			for n := range sparse {
				for i := range sparse[n].F {
					if sparse[n].F[i] != dense[n].F[i] {
						t.Fatalf("%s[%d]: row-wise %v, dense %v", n, i, sparse[n].F[i], dense[n].F[i])
					}
				}
			}
			if relDiff(sparse["emb"].F, init["emb"].F) < 1e-2 {
				t.Fatal("the table barely moved; the test would not discriminate")
			}
		})
	}
}

// Lazy momentum: a row no batch touched keeps its value and its velocity,
// the rows that were touched move.
func TestSparseMomentumIsLazy(t *testing.T) {
	g2 := sparseModel(t, strings.Replace(mustRead(t, "../../testdata/sparse/emb-sgd.yaml"), "{type: sgd, lr: 0.5}", "{type: momentum, lr: 0.1, momentum: 0.9}", 1))
	p, err := program.Compile(g2, program.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := program.Init(p, program.InitOptions{From: "../../testdata/sparse/init.safetensors"}); err != nil {
		t.Fatal(err)
	}
	feed := newTestFeed(t, g2, p)
	emb := p.Scope["emb"]
	before := append([]float32{}, emb.F...)
	touched := map[int32]bool{}
	for k := 0; k < 3; k++ {
		feed(k)
		for _, id := range p.Scope["ids"].I {
			touched[id] = true
		}
		if err := p.Run(&program.Runtime{Ctx: context.Background()}); err != nil {
			t.Fatal(err)
		}
	}
	vel := p.Scope["emb@velocity"]
	d := emb.RowWidth()
	moved, kept := 0, 0
	for r := 0; r < emb.Shape[0]; r++ {
		row, v := emb.F[r*d:(r+1)*d], vel.F[r*d:(r+1)*d]
		same := true
		for j := range row {
			same = same && row[j] == before[r*d+j]
		}
		zeroV := true
		for _, x := range v {
			zeroV = zeroV && x == 0
		}
		if touched[int32(r)] {
			if same || zeroV {
				t.Fatalf("row %d was touched but did not move (value same %v, velocity zero %v)", r, same, zeroV)
			}
			moved++
		} else {
			if !same || !zeroV {
				t.Fatalf("row %d was never touched but changed (value same %v, velocity zero %v)", r, same, zeroV)
			}
			kept++
		}
	}
	if moved == 0 || kept == 0 {
		t.Fatalf("moved %d rows, kept %d: the data must touch some rows and not others", moved, kept)
	}
}

// Duplicate ids within a batch are merged once: the row gradient holds
// each id once, with the sum of its rows of dy.
func TestRowGradientMergesDuplicates(t *testing.T) {
	g := sparseModel(t, `psgraph: 1
name: dup
data:
  csv: ids.csv
  ids: {name: ids, columns: [0, 3]}
params:
  emb: {shape: [10, 2]}
ops:
  - {type: lookup_table, inputs: [emb, ids], outputs: [e]}
  - {type: sum, inputs: [e], outputs: [loss]}
train: {loss: loss, batch: 2, optimizer: {type: sgd, lr: 1}}
`)
	p, err := program.Compile(g, program.CompileOptions{KeepTemps: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	copy(p.Scope["ids"].I, []int32{7, 2, 7, 2, 7, 9})
	for i := range p.Scope["emb"].F {
		p.Scope["emb"].F[i] = float32(i)
	}
	if err := p.Run(&program.Runtime{Ctx: context.Background()}); err != nil {
		t.Fatal(err)
	}
	gr := p.Scope["emb@GRAD"]
	if got := gr.Rows.IDs; len(got) != 3 || got[0] != 7 || got[1] != 2 || got[2] != 9 {
		t.Fatalf("rows %v, want [7 2 9] (each id once, in order of first appearance)", got)
	}
	want := []float32{3, 3, 2, 2, 1, 1}
	for i, w := range want {
		if gr.F[i] != w {
			t.Fatalf("values %v, want %v", gr.F, want)
		}
	}
	emb := p.Scope["emb"]
	for r := 0; r < 10; r++ {
		dec := map[int]float32{7: 3, 2: 2, 9: 1}[r]
		for j := 0; j < 2; j++ {
			if w := float32(r*2+j) - dec; emb.F[r*2+j] != w {
				t.Fatalf("emb[%d][%d] = %v, want %v", r, j, emb.F[r*2+j], w)
			}
		}
	}
}

// A table read by two lookups gets one row gradient holding the union of
// their rows; a table also read densely gets a dense gradient, through an
// explicit to_dense.
func TestRowGradientsOfSharedTable(t *testing.T) {
	src := `psgraph: 1
name: shared
data:
  csv: ids.csv
  ids: {name: ids, columns: [0, 2]}
params:
  emb: {shape: [10, 2]}
ops:
  - {type: slice_rows, inputs: [ids], outputs: [a], attrs: {start: 0, end: 1, axis: 1}}
  - {type: slice_rows, inputs: [ids], outputs: [b], attrs: {start: 1, end: 2, axis: 1}}
  - {type: lookup_table, inputs: [emb, a], outputs: [ea]}
  - {type: lookup_table, inputs: [emb, b], outputs: [eb]}
  - {type: add, inputs: [ea, eb], outputs: [e]}
  - {type: sum, inputs: [e], outputs: [loss]}
EXTRA
train: {loss: loss, batch: 2, optimizer: {type: sgd, lr: 1}}
`
	g := sparseModel(t, strings.Replace(src, "EXTRA\n", "", 1))
	if ty := g.Types["emb@GRAD"]; !ty.Sparse() || ty.MaxRows != 4 {
		t.Fatalf("emb@GRAD %v, want row-sparse with at most 4 rows", ty)
	}
	p, err := program.Compile(g, program.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	copy(p.Scope["ids"].I, []int32{1, 3, 3, 5}) // a = [1, 3], b = [3, 5]
	if err := p.Run(&program.Runtime{Ctx: context.Background()}); err != nil {
		t.Fatal(err)
	}
	for r, dec := range map[int]float32{1: 1, 3: 2, 5: 1, 0: 0, 9: 0} {
		if got := p.Scope["emb"].F[2*r]; got != -dec {
			t.Fatalf("emb[%d] = %v, want %v", r, got, -dec)
		}
	}
	p.Close()

	dense := strings.Replace(src, "EXTRA\n", "  - {type: sum, inputs: [emb], outputs: [reg]}\n  - {type: add, inputs: [loss, reg], outputs: [total]}\n", 1)
	dense = strings.Replace(dense, "loss: loss,", "loss: total,", 1)
	g = sparseModel(t, dense)
	if ty := g.Types["emb@GRAD"]; ty.Sparse() {
		t.Fatalf("emb@GRAD %v, want dense: emb is also read by sum", ty)
	}
	found := false
	for _, op := range g.Ops {
		found = found || op.Type == "to_dense"
	}
	if !found {
		t.Fatal("no to_dense op: the row gradient was densified silently")
	}
}

// A dense op reading a row gradient, and an optimizer that is not
// element-wise, are refused at check time with a message saying why.
func TestSparseRefusals(t *testing.T) {
	base := `psgraph: 1
name: refuse
data:
  csv: ids.csv
  ids: {name: ids, columns: [0, 2]}
params:
  emb: {shape: [10, 2]}
ops:
  - {type: lookup_table, inputs: [emb, ids], outputs: [e]}
  - {type: sum, inputs: [e], outputs: [loss]}
train:
  loss: loss
  batch: 1
  optimizer: OPT
`
	norm := `{lr: 0.1, update: [{type: mean, inputs: [$grad], outputs: [m]}, {type: scale, inputs: [$grad], outputs: [s], attrs: {factor: 0.1}}, {type: add, inputs: [s, m], outputs: [st]}, {type: sub, inputs: [$param, st], outputs: [p]}], assign: {$param: p}}`
	_, err := dsl.LoadBytes("../../testdata/sparse/refuse.yaml", []byte(strings.Replace(base, "OPT", norm, 1)))
	if err == nil || !strings.Contains(err.Error(), "not element-wise") || !strings.Contains(err.Error(), "refuse.yaml:") || !strings.Contains(err.Error(), "lookup_table") {
		t.Fatalf("a mean over the row gradient in the optimizer: error %v, want a refusal naming the file and why", err)
	}
	_, err = dsl.LoadBytes("../../testdata/sparse/consumer.yaml", []byte(`psgraph: 1
name: dense-consumer
data:
  csv: ids.csv
  ids: {name: ids, columns: [0, 2]}
params:
  emb: {shape: [10, 2]}
ops:
  - {type: lookup_table, inputs: [emb, ids], outputs: [dy]}
  - {type: lookup_table_grad, inputs: [dy, ids, emb], outputs: [g]}
  - {type: matmul, inputs: [g, emb], outputs: [bad], attrs: {transpose_b: true}}
`))
	if err == nil || !strings.Contains(err.Error(), "to_dense") || !strings.Contains(err.Error(), "consumer.yaml:11:") {
		t.Fatalf("matmul of a row gradient: error %v, want a check-time refusal at consumer.yaml:10 pointing at to_dense", err)
	}
}

// sparseModel loads a model given as text, as if it were a file beside
// testdata/sparse/ids.csv.
func sparseModel(t *testing.T, src string) *dsl.Graph {
	t.Helper()
	return sparseModelAt(t, "../../testdata/sparse/model.yaml", []byte(src))
}

// sparseModelAt loads src as if it were the model file at path.
func sparseModelAt(tb testing.TB, path string, src []byte) *dsl.Graph {
	tb.Helper()
	g, err := dsl.LoadBytes(path, src)
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// newTestFeed returns a function that feeds batch k of g's data stream
// into p's data variables.
func newTestFeed(t *testing.T, g *dsl.Graph, p *program.Program) func(k int) {
	t.Helper()
	loaded, err := data.LoadSplit(g.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := loaded.Train
	st, f := data.NewStream(set), program.NewFeeder(g, p.Scope)
	return func(k int) { f.Fill(st, int64(k*g.Batch())) }
}

// A user-written optimizer template gets the same row-wise rewrite as a
// built-in: hand-written momentum on a table ends bit for bit where the
// built-in momentum ends, in a local run and in a 2x2 job (on the shards).
func TestUserTemplateOnTableEqualsBuiltin(t *testing.T) {
	base := mustRead(t, "../../testdata/sparse/emb-sgd.yaml")
	custom := strings.Replace(base, "optimizer: {type: sgd, lr: 0.5}", `optimizer:
    lr: 0.1
    state: {velocity: {init: zeros}}
    update:
      - {type: scale, inputs: [$velocity], outputs: [v_decay], attrs: {factor: 0.9}}
      - {type: add, inputs: [v_decay, $grad], outputs: [v_new]}
      - {type: scale, inputs: [v_new], outputs: [step], attrs: {factor: $lr}}
      - {type: sub, inputs: [$param, step], outputs: [p_new]}
    assign: {$velocity: v_new, $param: p_new}`, 1)
	builtin := strings.Replace(base, "{type: sgd, lr: 0.5}", "{type: momentum, lr: 0.1, momentum: 0.9}", 1)
	gc, gb := sparseModel(t, custom), sparseModel(t, builtin)
	found := 0
	for _, op := range gc.Ops {
		if op.Type == "gather_rows" && op.Param == "emb" {
			found++
		}
	}
	if found != 2 {
		t.Fatalf("the user template on emb has %d gather_rows ops, want 2 (the table and its velocity)", found)
	}
	opt := trainer.RunOptions{Role: "local", InitFrom: "../../testdata/sparse/init.safetensors", Steps: 30}
	a, b := trainGraph(t, gc, opt), trainGraph(t, gb, opt)
	sameParams(t, "local", a, b)
	job := trainer.RunOptions{Steps: 30, Batch: 8, InitFrom: opt.InitFrom, Log: zerolog.Nop()}
	ja, _, err := modelfile.LoadSafetensors(runTableJob(t, gc, 2, 2, false, job))
	if err != nil {
		t.Fatal(err)
	}
	jb, _, err := modelfile.LoadSafetensors(runTableJob(t, gb, 2, 2, false, job))
	if err != nil {
		t.Fatal(err)
	}
	sameParams(t, "2x2", ja, jb)
}

func sameParams(t *testing.T, what string, custom, builtin map[string]*tensor.Tensor) {
	t.Helper()
	if len(custom) != len(builtin) || len(builtin) == 0 {
		t.Fatalf("%s: %d and %d tensors", what, len(custom), len(builtin))
	}
	for name, x := range builtin {
		for i := range x.F {
			if custom[name].F[i] != x.F[i] {
				t.Fatalf("%s: %s[%d]: user template %v, built-in %v", what, name, i, custom[name].F[i], x.F[i])
			}
		}
	}
}

// trainGraph trains g and returns its saved parameters.
func trainGraph(t *testing.T, g *dsl.Graph, opt trainer.RunOptions) map[string]*tensor.Tensor {
	t.Helper()
	opt.Save = filepath.Join(t.TempDir(), "params.safetensors")
	opt.Log = zerolog.Nop()
	if _, err := trainer.Train(context.Background(), g, opt); err != nil {
		t.Fatal(err)
	}
	params, _, err := modelfile.LoadSafetensors(opt.Save)
	if err != nil {
		t.Fatal(err)
	}
	return params
}
