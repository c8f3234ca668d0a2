package partition

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
)

// bundleSource has three fixed tables: ea and eb read by ids from the
// data, ec by ids computed from ea's rows (a cast of a looked-up value),
// so ea's rows must arrive before the request for ec's can leave.
const bundleSource = `psgraph: 1
name: b
data:
  csv: d.csv
  label: {name: y, column: 0, dtype: float32}
  ids:
    - {name: a, column: 1}
    - {name: c, column: 2}
params:
  ea: {shape: [50, 1], init: {type: normal, std: 0.1, seed: 1}}
  eb: {shape: [30, 8], init: {type: normal, std: 0.1, seed: 2}}
  ec: {shape: [50, 2], init: {type: normal, std: 0.1, seed: 3}}
  w: {shape: [11, 1], init: {type: normal, std: 0.1, seed: 4}}
ops:
  - {type: reshape, inputs: [a], outputs: [ia], attrs: {shape: [-1]}}
  - {type: lookup_table, inputs: [ea, ia], outputs: [xa]}
  - {type: reshape, inputs: [c], outputs: [ic], attrs: {shape: [-1]}}
  - {type: lookup_table, inputs: [eb, ic], outputs: [xb]}
  - {type: reshape, inputs: [xa], outputs: [fa], attrs: {shape: [-1]}}
  - {type: cast, inputs: [fa], outputs: [id2], attrs: {to: int32}}
  - {type: lookup_table, inputs: [ec, id2], outputs: [xc]}
  - {type: concat, inputs: [xa, xb, xc], outputs: [h], attrs: {axis: 1}}
  - {type: matmul, inputs: [h, w], outputs: [logit]}
  - {type: sigmoid_cross_entropy, inputs: [logit, y], outputs: [loss]}
train:
  loss: loss
  batch: 16
  optimizer: {type: sgd, lr: 0.1}
`

func bundleOps(g *dsl.Graph) map[string]int {
	n := map[string]int{}
	for _, op := range g.Ops {
		n[op.Type]++
	}
	return n
}

// Split bundles the fixed tables (one fetch_tables, one send_tables, and
// per pserver one serve_tables and accumulate_tables over their shards),
// except a table whose rows another table's ids are computed from: ea
// keeps its own ops on both sides and is fetched first, and eb and ec go
// in the bundle after the ops that compute ec's ids. With
// SeparateTables nothing is bundled.
func TestSplitBundlesTables(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "d.csv"), []byte("1,3,4\n0,5,6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := dsl.LoadBytes(filepath.Join(dir, "b.yaml"), []byte(bundleSource))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Check(); err != nil {
		t.Fatal(err)
	}
	p, err := Split(g, Options{Trainers: 2, PServers: 2})
	if err != nil {
		t.Fatal(err)
	}
	tr := bundleOps(p.Trainer)
	if tr["fetch_tables"] != 1 || tr["send_tables"] != 1 || tr["fetch_rows"] != 1 || tr["send_rows"] != 1 {
		t.Errorf("trainer ops %v: want eb and ec bundled, ea fetched alone", tr)
	}
	for _, op := range p.Trainer.Ops {
		switch op.Type {
		case "fetch_tables":
			if got := op.Outputs; len(got) != 2 || got[0] != "eb@fetched" || got[1] != "ec@fetched" || op.Attrs.String("var") != ops.TableBundle {
				t.Errorf("fetch_tables %v -> %v, want [eb@fetched ec@fetched] (name order) under %s", op.Inputs, got, ops.TableBundle)
			}
		case "fetch_rows":
			if op.Attrs.String("var") != "ea" {
				t.Errorf("fetch_rows of %s, want ea's", op.Attrs.String("var"))
			}
		}
	}
	for i, ps := range p.PServers {
		o := bundleOps(ps)
		if o["serve_tables"] != 1 || o["accumulate_tables"] != 1 || o["serve_rows"] != 1 || o["accumulate_rows"] != 1 {
			t.Errorf("pserver-%d ops %v: want eb and ec's shards bundled, ea's alone", i, o)
		}
	}
	// The plan's transfers: per pserver the bundle's three and ea's three.
	bundles := 0
	for _, ti := range p.Info.Transfers {
		if ti.Var == ops.TableIDs(ops.TableBundle) || ti.Var == ops.TableRows(ops.TableBundle) || ti.Var == ops.GradName(ops.TableBundle) {
			bundles++
		}
	}
	if bundles != 6 {
		t.Errorf("%d bundle transfers in the plan, want 3 per pserver", bundles)
	}
	if want := "12 for lookup tables: ids up, rows down, row gradients up, those of 2 tables bundled"; !strings.Contains(p.Summary(), want) {
		t.Errorf("the summary does not say %q:\n%s", want, p.Summary())
	}
	sep, err := Split(g, Options{Trainers: 2, PServers: 2, SeparateTables: true})
	if err != nil {
		t.Fatal(err)
	}
	if o := bundleOps(sep.Trainer); o["fetch_tables"] != 0 || o["fetch_rows"] != 3 {
		t.Errorf("SeparateTables: trainer ops %v, want three fetch_rows", o)
	}
}
