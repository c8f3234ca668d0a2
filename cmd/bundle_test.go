package cmd_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A 2x2 job of three tables over TCP, as psgraph train runs it: split
// bundles the tables (one fetch_tables in the trainer's plan), the job
// trains, and the model trainer 0 saves (its tables pulled through the
// pservers) evaluates to the loss of one node trained on the same rows
// with twice the batch, up to float32 rounding (the job averages two
// halves' gradients where one node sums the whole batch).
func TestTrainBundledTablesOverTCP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "ctr.tsv")
	ok(t, psgraph(t, "gen", "criteo", "-o", data, "--rows", "4000", "--seed", "3"))
	model := filepath.Join(dir, "three.yaml")
	src := `psgraph: 1
name: three
data:
  csv: ctr.tsv
  delimiter: tab
  label: {name: click, column: 0, dtype: float32}
  ids:
    - {name: a, column: 14, hash_buckets: 1000}
    - {name: b, column: 15, hash_buckets: 500}
    - {name: c, column: 16, hash_buckets: 700}
params:
  ea: {shape: [1000, 4], init: {type: normal, std: 0.1, seed: 1}}
  eb: {shape: [500, 8], init: {type: normal, std: 0.1, seed: 2}}
  ec: {shape: [700, 2], init: {type: normal, std: 0.1, seed: 3}}
  w: {shape: [14, 1], init: {type: normal, std: 0.1, seed: 4}}
ops:
  - {type: reshape, inputs: [a], outputs: [ia], attrs: {shape: [-1]}}
  - {type: lookup_table, inputs: [ea, ia], outputs: [xa]}
  - {type: reshape, inputs: [b], outputs: [ib], attrs: {shape: [-1]}}
  - {type: lookup_table, inputs: [eb, ib], outputs: [xb]}
  - {type: reshape, inputs: [c], outputs: [ic], attrs: {shape: [-1]}}
  - {type: lookup_table, inputs: [ec, ic], outputs: [xc]}
  - {type: concat, inputs: [xa, xb, xc], outputs: [h], attrs: {axis: 1}}
  - {type: matmul, inputs: [h, w], outputs: [logit]}
  - {type: sigmoid_cross_entropy, inputs: [logit, click], outputs: [loss]}
  - {type: auc, inputs: [logit, click], outputs: [auc]}
train:
  loss: loss
  metrics: [auc]
  batch: 32
  optimizer: {type: adagrad, lr: 0.1}
`
	if err := os.WriteFile(model, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(dir, "plan")
	ok(t, psgraph(t, "split", model, "--trainers", "2", "--pservers", "2", "-o", plan))
	tr, err := os.ReadFile(filepath.Join(plan, "trainer.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(tr), "type: fetch_tables") != 1 || strings.Contains(string(tr), "type: fetch_rows") {
		t.Fatalf("split did not bundle the three tables:\n%s", tr)
	}
	job := filepath.Join(dir, "job.safetensors")
	ok(t, psgraph(t, "train", model, "--trainers", "2", "--pservers", "2", "--steps", "60", "--save", job))
	local := filepath.Join(dir, "local.safetensors")
	ok(t, psgraph(t, "run", "--role", "local", model, "--steps", "60", "--batch", "64", "--save", local))
	ej := summary(t, psgraph(t, "eval", model, "--init-from", job))
	el := summary(t, psgraph(t, "eval", model, "--init-from", local))
	lj, _ := ej["loss"].(float64)
	ll, _ := el["loss"].(float64)
	t.Logf("eval loss: the 2x2 job's model %v, one node's %v", lj, ll)
	if lj == 0 || math.Abs(lj-ll) > 1e-5*ll {
		t.Errorf("eval loss %v of the 2x2 job's model, %v of one node's: want equal up to 1e-5 relative (%s)", lj, ll, fmt.Sprint(ej))
	}
}
