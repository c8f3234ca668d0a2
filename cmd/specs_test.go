package cmd_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// specsYAML reads two features specs and three ids specs with tables of
// their own sizes: integer user ids (num_ids 50), three categorical
// columns hashed into 64 buckets, and a multi-valued history column
// hashed into 300 buckets in one shared space, cut to max_len 4.
const specsYAML = `psgraph: 1
name: specs
data:
  csv: train.tsv
  delimiter: tab
  label: {name: y, column: 0, dtype: float32}
  features:
    - {name: d1, columns: [1, 2]}
    - {name: d2, columns: [2, 3], transform: log}
  ids:
    - {name: user, column: 3, num_ids: 50}
    - {name: cat, columns: [4, 7], hash_buckets: 64}
    - {name: hist, column: 7, separator: "|", max_len: 4, hash_buckets: 300, shared_space: true}
  STREAM
params:
  U: {shape: [50, 4], init: {type: normal, std: 0.1, seed: 1}}
  C: {shape: [64, 4], init: {type: normal, std: 0.1, seed: 2}}
  H: {shape: [300, 4], init: {type: normal, std: 0.1, seed: 3}}
  W: {shape: [34, 1], init: {type: xavier_uniform, seed: 4}}
  b: {shape: [1]}
ops:
  - {type: lookup_table, inputs: [U, user], outputs: [u3]}
  - {type: reshape, inputs: [u3], outputs: [u], attrs: {shape: [-1, 4]}}
  - {type: lookup_table, inputs: [C, cat], outputs: [c3]}
  - {type: reshape, inputs: [c3], outputs: [c], attrs: {shape: [-1, 12]}}
  - {type: lookup_table, inputs: [H, hist], outputs: [h3]}
  - {type: reshape, inputs: [h3], outputs: [h], attrs: {shape: [-1, 16]}}
  - {type: concat, inputs: [u, c, h, d1, d2], outputs: [x], attrs: {axis: 1}}
  - {type: matmul, inputs: [x, W], outputs: [xw]}
  - {type: add, inputs: [xw, b], outputs: [logits]}
  - {type: sigmoid_cross_entropy, inputs: [logits, y], outputs: [loss]}
  - {type: auc, inputs: [logits, y], outputs: [auc]}
train:
  loss: loss
  metrics: [auc]
  batch: 32
  steps: 300
  optimizer: {type: adagrad, lr: 0.2}
`

// writeSpecsData writes rows whose click depends on the user's parity and
// on the items of the history (even items raise it): each history holds 4
// to 6 items, so a history of more than 4 is cut. lookup_table reads
// every slot, so no history here is shorter than max_len (-1 padding is
// for a pooled lookup, which skips it). It returns the rows cut and the
// click rate.
func writeSpecsData(t *testing.T, path string, rows int) (cut int, rate float64) {
	t.Helper()
	r := rand.New(rand.NewPCG(7, 1))
	var b strings.Builder
	clicks := 0
	for i := 0; i < rows; i++ {
		user := r.IntN(50)
		z := -1.0
		if user%2 == 0 {
			z = 1
		}
		n := 4 + r.IntN(3)
		if n > 4 {
			cut++
		}
		items := make([]string, n)
		for k := range items {
			it := r.IntN(30)
			items[k] = fmt.Sprintf("item%d", it)
			if k < 4 { // what the model sees
				z += map[bool]float64{true: 0.8, false: -0.8}[it%2 == 0]
			}
		}
		y := 0
		if r.Float64() < 1/(1+math.Exp(-z)) {
			y = 1
			clicks++
		}
		fmt.Fprintf(&b, "%d\t%.3f\t%d\t%d\tc%x\tc%x\tc%x\t%s\n", y, r.NormFloat64(), r.IntN(100), user, r.IntN(20), r.IntN(20), r.IntN(20), strings.Join(items, "|"))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return cut, float64(clicks) / float64(rows)
}

// A model with several features and ids specs (integer ids, hashed ids
// of another bucket count, a multi-valued column) checks, trains locally
// in memory and streamed to the same summary and below the click rate's
// entropy, trains as a 2x2 job, and predicts; check and run report the
// histories cut to max_len.
func TestDataSpecsTrainEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const rows = 2000
	cut, p := writeSpecsData(t, filepath.Join(dir, "train.tsv"), rows)
	entropy := -(p*math.Log(p) + (1-p)*math.Log(1-p))
	mem, stream := filepath.Join(dir, "specs.yaml"), filepath.Join(dir, "specs-stream.yaml")
	for path, s := range map[string]string{mem: "", stream: "stream: true"} {
		if err := os.WriteFile(path, []byte(strings.Replace(specsYAML, "STREAM", s, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantCut := fmt.Sprintf(`data.ids[2] "hist" (%s:13:7): %d fields held more than max_len 4 ids; each kept its first 4`, mem, cut)
	for _, model := range []string{mem, stream} {
		r := psgraph(t, "check", model)
		if r.code != 0 || !strings.Contains(r.stdout, "data (2000 rows): d1 float32[batch, 1], d2 float32[batch, 1], y float32[batch, 1], user int32[batch, 1], cat int32[batch, 3], hist int32[batch, 4]") ||
			!strings.Contains(r.stdout, strings.Replace(wantCut, mem, model, 1)) {
			t.Fatalf("check %s: exit %d, want the data line and %q\n%s%s", model, r.code, wantCut, r.stdout, r.stderr)
		}
	}
	var sums [2]struct{ Loss, AUC float64 }
	for i, model := range []string{mem, stream} {
		r := psgraph(t, "run", "--role", "local", "--log-format", "json", "--final-pass", model)
		if r.code != 0 {
			t.Fatalf("run %s: exit %d\n%s", model, r.code, r.stderr)
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &sums[i]); err != nil {
			t.Fatalf("run %s: summary %q: %v", model, r.stdout, err)
		}
		if i == 0 && strings.Count(r.stderr, fmt.Sprintf(`"fields":%d`, cut)) != 1 {
			t.Errorf("run in memory: want one warning of the %d fields cut over the file:\n%s", cut, r.stderr)
		}
		if i == 1 && strings.Count(r.stderr, "held more than max_len 4 ids") != 1 {
			t.Errorf("run streamed: want one warning of the fields cut:\n%s", r.stderr)
		}
	}
	// Read as an online source (standard input), the rows its reader
	// parsed are counted too, once the reader is done.
	online := filepath.Join(dir, "specs-online.yaml")
	if err := os.WriteFile(online, []byte(strings.Replace(strings.Replace(specsYAML, "STREAM", "", 1), "csv: train.tsv", `csv: "-"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := streamRun(t, "online", filepath.Join(dir, "train.tsv"), "run", "--role", "local", "--log-format", "json", online).wait(t, time.Minute); r.code != 0 ||
		strings.Count(r.stderr, "held more than max_len 4 ids") != 1 || !strings.Contains(r.stderr, fmt.Sprintf(`"fields":%d`, cut)) {
		t.Errorf("run online: exit %d, want one warning of the %d fields cut:\n%s", r.code, cut, r.stderr)
	}
	t.Logf("click rate %.3f, entropy %.4f; in memory %+v, streamed %+v", p, entropy, sums[0], sums[1])
	if sums[0] != sums[1] {
		t.Errorf("in memory %+v, streamed %+v: the same batches should give the same summary", sums[0], sums[1])
	}
	if !(sums[0].Loss < entropy-0.05) || !(sums[0].AUC > 0.7) {
		t.Errorf("loss %.4f (entropy %.4f), auc %.3f: the model did not learn from the users and histories", sums[0].Loss, entropy, sums[0].AUC)
	}

	// A 2x2 job shards the three tables and feeds each trainer its rows.
	saved := filepath.Join(dir, "specs.safetensors")
	r := psgraph(t, "train", stream, "--trainers", "2", "--pservers", "2", "--steps", "150", "--save", saved)
	if r.code != 0 {
		t.Fatalf("train 2x2: exit %d\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var job struct{ Loss float64 }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &job); err != nil || !(job.Loss < entropy-0.03) {
		t.Errorf("2x2 job: summary %q (%v): want a loss below the entropy %.4f", lines[len(lines)-1], err, entropy)
	}
	// Predicting reads every spec but the label.
	out := filepath.Join(dir, "pred.csv")
	r = psgraph(t, "predict", mem, "--init-from", saved, "--data", filepath.Join(dir, "train.tsv"), "-o", out)
	if r.code != 0 {
		t.Fatalf("predict: exit %d\n%s", r.code, r.stderr)
	}
	pred, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(pred), "\n"); n != rows+1 {
		t.Errorf("predict wrote %d lines, want a header and %d rows", n, rows)
	}
}
