package job

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/trainer"
)

// dynamicJob writes a CSV of a label and 3 integer keys per row (skewed:
// many keys seen once) and a model reading them through a dynamic table
// with min_count 2; it returns the model and each key's count.
func dynamicJob(t *testing.T, dynamic string) (*dsl.Graph, map[int64]int) {
	t.Helper()
	return dynamicJobWith(t, dynamic, "adagrad, lr: 0.1")
}

// dynamicJobWith is dynamicJob trained by train.optimizer {type: opt}.
func dynamicJobWith(t *testing.T, dynamic, opt string) (*dsl.Graph, map[int64]int) {
	t.Helper()
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(3, 4))
	var b strings.Builder
	counts := map[int64]int{}
	for range 400 {
		fmt.Fprintf(&b, "%d", r.IntN(2))
		for range 3 {
			u := r.Float64()
			k := int64(u*u*300) * 1_000_000_007 // keys beyond int32
			counts[k]++
			fmt.Fprintf(&b, ",%d", k)
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, "d.csv"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	src := `psgraph: 1
name: dyn
data:
  csv: d.csv
  label: {name: y, column: 0}
  ids: {name: keys, columns: [1, 4], key: int64}
params:
  emb: {dynamic: ` + dynamic + `, init: {type: normal, std: 0.1, seed: 7}}
  W: {shape: [12, 2], init: {type: normal, std: 0.1, seed: 8}}
ops:
  - {type: lookup_table, inputs: [emb, keys], outputs: [e3]}
  - {type: reshape, inputs: [e3], outputs: [e], attrs: {shape: [-1, 12]}}
  - {type: matmul, inputs: [e, W], outputs: [logits]}
  - {type: softmax_cross_entropy, inputs: [logits, y], outputs: [loss]}
train: {loss: loss, batch: 8, steps: 50, optimizer: {type: ` + opt + `}}
`
	path := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return load(t, path), counts
}

// --save writes a dynamic table as its keys (int64, ascending) and their
// rows: the keys are exactly those seen min_count times (counted here);
// eval reads the file back to the loss of the run's final pass; a key
// the file lacks reads zeros; --init-from loads the rows exactly; numpy
// reads the file with the format's description alone.
func TestDynamicTableModelFile(t *testing.T) {
	g, counts := dynamicJob(t, "{dim: 4, min_count: 2}")
	save := filepath.Join(t.TempDir(), "model.safetensors")
	prom := metrics.New("local")
	sum, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Save: save, Log: zerolog.Nop(), FinalPass: trainer.FinalPassOn, Prom: prom})
	if err != nil {
		t.Fatal(err)
	}
	ts, _, err := modelfile.LoadSafetensors(save)
	if err != nil {
		t.Fatal(err)
	}
	keys, rows := ts["emb.keys"], ts["emb"]
	var want []int64
	for k, c := range counts {
		if c >= 2 {
			want = append(want, k)
		}
	}
	slices.Sort(want)
	if keys == nil || rows == nil || !slices.Equal(keys.L, want) {
		t.Fatalf("saved keys %v, want the %d keys seen twice or more", keys, len(want))
	}
	if rows.Shape[0] != len(want) || rows.Shape[1] != 4 {
		t.Fatalf("saved rows %v", rows.Shape)
	}
	if len(want) == len(counts) {
		t.Fatal("every key was seen twice: the data tests no admission")
	}

	// The summary line and the Prometheus metrics count the same rows.
	line, err := json.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	wantJSON := fmt.Sprintf(`"tables":{"emb":{"live_rows":%d,"held_rows":%d,"admitted":%d,"evicted_ttl":0,"evicted_capacity":0,"bytes":`, len(want), len(want), len(want))
	if !strings.Contains(string(line), wantJSON) {
		t.Errorf("summary %s\nwant %s...", line, wantJSON)
	}
	families, err := prom.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	gauges := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if strings.HasPrefix(f.GetName(), "psgraph_dynamic_table_") {
				v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
				name := f.GetName()
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" {
						name += "." + l.GetValue()
					}
				}
				gauges[name] = v
			}
		}
	}
	if gauges["psgraph_dynamic_table_live_rows"] != float64(len(want)) || gauges["psgraph_dynamic_table_admitted_total"] != float64(len(want)) ||
		gauges["psgraph_dynamic_table_bytes"] != float64(sum.Tables[0].Bytes) || sum.Tables[0].Bytes <= 0 {
		t.Errorf("metrics %v, want %d live rows and admissions, %d bytes", gauges, len(want), sum.Tables[0].Bytes)
	}

	res, err := evaluate.EvalModel(context.Background(), g, evaluate.EvalOptions{InitFrom: save, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Loss != sum.Loss {
		t.Errorf("eval of the saved model: loss %v, the run's final pass %v", res.Loss, sum.Loss)
	}

	lowered, tables, err := dsl.LowerDynamic(g)
	if err != nil || lowered == nil {
		t.Fatal(err)
	}
	tab, err := program.ReadTable(tables[0], keys, rows, save)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 8)
	if err := tab.Read([]int64{want[0], 12345}, got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[:4], rows.F[:4]) || !slices.Equal(got[4:], make([]float32, 4)) {
		t.Errorf("read %v: want key %d's saved row %v, then zeros for an unseen key", got, want[0], rows.F[:4])
	}

	// --init-from and one step: every row the step did not touch is the
	// file's, bit for bit.
	again := filepath.Join(t.TempDir(), "again.safetensors")
	if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 1, InitFrom: save, Save: again, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	ts2, _, err := modelfile.LoadSafetensors(again)
	if err != nil {
		t.Fatal(err)
	}
	after := map[int64][]float32{}
	for i, k := range ts2["emb.keys"].L {
		after[k] = ts2["emb"].F[i*4 : (i+1)*4]
	}
	touched := map[int64]bool{}
	for _, k := range firstBatchKeys(t, g) {
		touched[k] = true
	}
	same := 0
	for i, k := range keys.L {
		if touched[k] {
			continue
		}
		if !slices.Equal(after[k], rows.F[i*4:(i+1)*4]) {
			t.Fatalf("key %d: %v after --init-from and a step that did not read it, %v in the file", k, after[k], rows.F[i*4:(i+1)*4])
		}
		same++
	}
	if same == 0 {
		t.Fatal("every saved key is in the first batch: the check checks nothing")
	}
	checkNumpyDynamic(t, save, keys.L, rows.F)
}

// checkNumpyDynamic reads a saved dynamic table with numpy, as docs/dsl.md
// describes, where numpy is installed.
func checkNumpyDynamic(t *testing.T, path string, keys []int64, rows []float32) {
	t.Helper()
	py := "/usr/bin/python3"
	if exec.Command(py, "-c", "import numpy").Run() != nil {
		t.Log("numpy not installed; skipping the numpy reader check")
		return
	}
	read := `
import json, struct, sys, numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
def tensor(name, dtype):
    e = header[name]; a, b = e["data_offsets"]
    return np.frombuffer(raw[8 + n + a:8 + n + b], dtype).reshape(e["shape"])
keys, rows = tensor("emb.keys", "<i8"), tensor("emb", "<f4")
print(json.dumps({"keys": [str(k) for k in keys], "rows": [float(x) for x in rows.ravel()]}))`
	out, err := exec.Command(py, "-c", read, path).Output()
	if err != nil {
		t.Fatalf("numpy reader: %v", err)
	}
	var got struct {
		Keys []string
		Rows []float64
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Keys) != len(keys) || len(got.Rows) != len(rows) {
		t.Fatalf("numpy read %d keys and %d values, want %d and %d", len(got.Keys), len(got.Rows), len(keys), len(rows))
	}
	for i, k := range keys {
		if got.Keys[i] != fmt.Sprint(k) {
			t.Fatalf("numpy key %d: %s, want %d", i, got.Keys[i], k)
		}
	}
	for i, x := range rows {
		if float32(got.Rows[i]) != x {
			t.Fatalf("numpy value %d: %v, want %v", i, got.Rows[i], x)
		}
	}
}

// firstBatchKeys is the keys of the first 8 rows of g's data file.
func firstBatchKeys(t *testing.T, g *dsl.Graph) []int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(g.File), "d.csv"))
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, line := range strings.Split(string(b), "\n")[:8] {
		for _, f := range strings.Split(line, ",")[1:] {
			var k int64
			fmt.Sscan(f, &k)
			out = append(out, k)
		}
	}
	return out
}

// A local run with a dynamic table checkpoints it as a snapshot and
// deltas beside the node's checkpoint; a run stopped at step 20 and
// resumed from its checkpoint ends with the same model, bit for bit, as
// the run never stopped (admission sketch, ttl evictions and adagrad's
// state included).
func TestDynamicTableCheckpointResumesBitwise(t *testing.T) {
	g, _ := dynamicJob(t, "{dim: 4, min_count: 2, ttl_steps: 15}")
	run := func(dir string, steps int, save string) {
		t.Helper()
		ck := &modelfile.Checkpointer{Dir: dir, Every: 5, Node: "local", Model: g.Name}
		if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: steps, Save: save, Checkpoint: ck, Log: zerolog.Nop()}); err != nil {
			t.Fatal(err)
		}
	}
	whole, stopped := t.TempDir(), t.TempDir()
	a, b := filepath.Join(whole, "a.safetensors"), filepath.Join(stopped, "b.safetensors")
	run(whole, 50, a)
	run(stopped, 20, "")
	run(stopped, 50, b)
	ta, _, err := modelfile.LoadSafetensors(a)
	if err != nil {
		t.Fatal(err)
	}
	tb, _, err := modelfile.LoadSafetensors(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"emb.keys", "emb", "W"} {
		x, y := ta[name], tb[name]
		if x == nil || y == nil || !x.Shape.Equal(y.Shape) || !slices.Equal(x.F, y.F) || !slices.Equal(x.L, y.L) {
			t.Errorf("%s differs between the whole run and the resumed one", name)
		}
	}
	links, err := (&modelfile.TableChain{Dir: stopped, Node: "local", Table: "emb"}).Links()
	if err != nil {
		t.Fatal(err)
	}
	deltas := 0
	for _, l := range links {
		if !l.Snapshot {
			deltas++
		}
		if _, err := os.Stat(filepath.Join(stopped, l.File)); err != nil {
			t.Errorf("the chain lists %s: %v", l.File, err)
		}
	}
	if len(links) == 0 || !links[0].Snapshot || deltas == 0 {
		t.Errorf("chain %+v: want a snapshot, then deltas", links)
	}
}
