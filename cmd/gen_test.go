package cmd_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var genAUCLine = regexp.MustCompile(`click rate ([0-9.]+); the true probabilities score AUC ([0-9.]+) against the drawn labels \(expected over label draws ([0-9.]+)\) and log loss ([0-9.]+)`)

// genStats runs psgraph gen criteo with args and returns the click rate,
// AUC and expected AUC it reports on stderr.
func genStats(t *testing.T, args ...string) (rate, auc, expected float64) {
	t.Helper()
	r := psgraph(t, append([]string{"gen", "criteo"}, args...)...)
	m := genAUCLine.FindStringSubmatch(r.stderr)
	if r.code != 0 || m == nil {
		t.Fatalf("gen %v: exit %d, no AUC line on stderr:\n%s%s", args, r.code, r.stdout, r.stderr)
	}
	v := make([]float64, 3)
	for i := range v {
		v[i], _ = strconv.ParseFloat(m[i+1], 64)
	}
	return v[0], v[1], v[2]
}

var genVarLine = regexp.MustCompile(`the logit's first-order part has variance ([0-9.]+) over the rows, its interactions ([0-9.]+) \(--truth (\w+) --interaction ([0-9.]+)\)`)

// genVariances runs psgraph gen criteo with args and returns the Bayes AUC
// and the variances of the logit's parts it reports on stderr.
func genVariances(t *testing.T, args ...string) (auc, first, inter float64) {
	t.Helper()
	r := psgraph(t, append([]string{"gen", "criteo"}, args...)...)
	m, a := genVarLine.FindStringSubmatch(r.stderr), genAUCLine.FindStringSubmatch(r.stderr)
	if r.code != 0 || m == nil || a == nil {
		t.Fatalf("gen %v: exit %d, no AUC or variance line on stderr:\n%s%s", args, r.code, r.stdout, r.stderr)
	}
	auc, _ = strconv.ParseFloat(a[2], 64)
	first, _ = strconv.ParseFloat(m[1], 64)
	inter, _ = strconv.ParseFloat(m[2], 64)
	return auc, first, inter
}

// The Bayes-optimal AUC gen reports is the AUC of the true probabilities
// it writes with --probs against the file's labels, counted here by ranks
// (ties at their mean rank), and the expected AUC its expectation over
// label draws, pair by pair.
func TestGenReportsBayesAUC(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file, probs := filepath.Join(dir, "fm.tsv"), filepath.Join(dir, "p.txt")
	rate, auc, expected := genStats(t, "-o", file, "--rows", "3000", "--seed", "2", "--vocab", "80", "--truth", "fm", "--interaction", "1.5", "--history", "5", "--probs", probs)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := os.ReadFile(probs)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		p     float64
		click bool
	}
	var rows []row
	pf := strings.Fields(string(ps))
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 41 {
			t.Fatalf("line %d has %d fields, want 40 and the history", i+1, len(f))
		}
		p, err := strconv.ParseFloat(pf[i], 64)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row{p, f[0] == "1"})
	}
	if len(rows) != 3000 || len(pf) != 3000 {
		t.Fatalf("%d rows, %d probabilities", len(rows), len(pf))
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].p < rows[j].p })
	var rankSum, pos float64
	for i := 0; i < len(rows); {
		j := i
		for j < len(rows) && rows[j].p == rows[i].p {
			j++
		}
		for _, r := range rows[i:j] {
			if r.click {
				rankSum += float64(i+j+1) / 2
				pos++
			}
		}
		i = j
	}
	neg := float64(len(rows)) - pos
	want := (rankSum - pos*(pos+1)/2) / (pos * neg)
	var ew, ep float64
	for _, a := range rows {
		for _, b := range rows {
			w := 0.0
			if a.p > b.p {
				w = 1
			} else if a.p == b.p {
				w = 0.5
			}
			ew += a.p * (1 - b.p) * w
			ep += a.p * (1 - b.p)
		}
	}
	for _, r := range rows { // the pairs of a row with itself are not pairs
		ew -= r.p * (1 - r.p) * 0.5
		ep -= r.p * (1 - r.p)
	}
	if math.Abs(auc-want) > 1e-6 || math.Abs(expected-ew/ep) > 1e-6 || math.Abs(rate-pos/3000) > 1e-6 {
		t.Errorf("gen reports click rate %.6f, AUC %.6f, expected %.6f; from the files: %.6f, %.6f, %.6f", rate, auc, expected, pos/3000, want, ew/ep)
	}
}

// linearYAML is logistic regression on the hashed ids and the integer
// features; fmYAML adds a factorization machine's pairwise interactions
// of 4-dim latent vectors of the ids (FM) in existing ops.
const linearYAML = `psgraph: 1
data:
  csv: FILE
  delimiter: tab
  label: {name: y, column: 0, dtype: float32}
  features: {name: dense, columns: [1, 14], fill: 0, transform: log}
  ids: {name: cat, columns: [14, 40], hash_buckets: 5000}
  normalize: standard
  eval: {fraction: 0.2}
params:
  w: {shape: [5000, 1]}
  wd: {shape: [13, 1]}
  b: {shape: [1]}
  V: {shape: [5000, 4], init: {type: normal, std: 0.1, seed: 3}}
ops:
  - {type: lookup_table, inputs: [w, cat], outputs: [w3]}
  - {type: reshape, inputs: [w3], outputs: [w2], attrs: {shape: [-1, 26]}}
  - {type: sum, inputs: [w2], outputs: [lin0], attrs: {axis: 1}}
  - {type: reshape, inputs: [lin0], outputs: [lin], attrs: {shape: [-1, 1]}}
  - {type: matmul, inputs: [dense, wd], outputs: [zd]}
  - {type: add, inputs: [lin, zd], outputs: [z0]}
  INTERACTIONS
  - {type: sigmoid_cross_entropy, inputs: [logits, y], outputs: [loss]}
  - {type: auc, inputs: [logits, y], outputs: [auc]}
train: {loss: loss, metrics: [auc], batch: 128, epochs: 2, optimizer: {type: adagrad, lr: 0.05}}
`

const linearOut = `- {type: add, inputs: [z0, b], outputs: [logits]}`

const fmOut = `- {type: lookup_table, inputs: [V, cat], outputs: [e]}
  - {type: sum, inputs: [e], outputs: [se], attrs: {axis: 1}}
  - {type: mul, inputs: [se, se], outputs: [se2]}
  - {type: mul, inputs: [e, e], outputs: [e2]}
  - {type: sum, inputs: [e2], outputs: [q], attrs: {axis: 1}}
  - {type: sub, inputs: [se2, q], outputs: [dq]}
  - {type: sum, inputs: [dq], outputs: [fm0], attrs: {axis: 1}}
  - {type: scale, inputs: [fm0], outputs: [fm1], attrs: {factor: 0.5}}
  - {type: reshape, inputs: [fm1], outputs: [fm], attrs: {shape: [-1, 1]}}
  - {type: add, inputs: [z0, fm], outputs: [z1]}
  - {type: add, inputs: [z1, b], outputs: [logits]}`

// heldOutAUC trains a model of file and returns its held-out AUC.
func heldOutAUC(t *testing.T, dir, name, file, interactions string) float64 {
	t.Helper()
	model := filepath.Join(dir, name+".yaml")
	src := strings.Replace(strings.Replace(linearYAML, "FILE", file, 1), "INTERACTIONS", interactions, 1)
	if err := os.WriteFile(model, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r := psgraph(t, "run", "--role", "local", "--log-format", "json", model)
	var sum struct {
		EvalAUC float64 `json:"eval_auc"`
	}
	if r.code != 0 || json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &sum) != nil {
		t.Fatalf("run %s: exit %d\n%s%s", name, r.code, r.stdout, r.stderr)
	}
	return sum.EvalAUC
}

// On --truth fm data a linear model's held-out AUC falls far short of the
// file's Bayes-optimal AUC, much further than on the default (linear)
// truth, while a factorization machine beats it: the interactions are
// there to learn.
func TestGenFMTruthNeedsInteractions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	aucs := map[string]float64{}
	bayes := map[string]float64{}
	for _, truth := range []string{"linear", "fm"} {
		file := filepath.Join(dir, truth+".tsv")
		_, bayes[truth], _ = genStats(t, "-o", file, "--rows", "60000", "--seed", "1", "--vocab", "100", "--truth", truth)
		aucs["linear model, "+truth+" truth"] = heldOutAUC(t, dir, "lin-"+truth, file, linearOut)
	}
	aucs["fm model, fm truth"] = heldOutAUC(t, dir, "fm-fm", filepath.Join(dir, "fm.tsv"), fmOut)
	t.Logf("Bayes-optimal AUC: %v; held-out AUC: %v", bayes, aucs)
	linGap, fmGap := bayes["linear"]-aucs["linear model, linear truth"], bayes["fm"]-aucs["linear model, fm truth"]
	if !(fmGap > 0.1 && fmGap > linGap+0.08) {
		t.Errorf("a linear model is %.3f below the Bayes AUC on fm truth, %.3f on linear truth; want the fm gap above 0.1 and 0.08 above the linear one", fmGap, linGap)
	}
	if d := aucs["fm model, fm truth"] - aucs["linear model, fm truth"]; !(d > 0.025) {
		t.Errorf("on fm truth the FM model's held-out AUC is %.3f above the linear model's, want > 0.025", d)
	}
}

// --interaction S multiplies the fm truth's pairwise term: gen reports the
// same first-order variance and S^2 times the interactions' variance over
// the same rows, a higher Bayes-optimal AUC, and a linear model of the ids
// reaches less (held out) while the best reachable rises.
func TestGenInteractionStrength(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	type run struct{ bayes, first, inter, linear float64 }
	runs := map[string]run{}
	for _, s := range []string{"1", "3"} {
		file := filepath.Join(dir, "fm"+s+".tsv")
		var r run
		r.bayes, r.first, r.inter = genVariances(t, "-o", file, "--rows", "40000", "--seed", "1", "--vocab", "100", "--truth", "fm", "--interaction", s)
		r.linear = heldOutAUC(t, dir, "lin"+s, file, linearOut)
		runs[s] = r
	}
	t.Logf("--interaction 1: %+v; --interaction 3: %+v", runs["1"], runs["3"])
	one, three := runs["1"], runs["3"]
	if one.first != three.first || math.Abs(three.inter/one.inter-9) > 9e-3 {
		t.Errorf("first-order variance %.4f then %.4f, interactions %.4f then %.4f: want equal and x9", one.first, three.first, one.inter, three.inter)
	}
	if !(three.bayes > one.bayes+0.03) || !(three.linear < one.linear-0.03) {
		t.Errorf("Bayes AUC %.4f then %.4f, a linear model's held-out AUC %.4f then %.4f: want the first up and the second down by 0.03",
			one.bayes, three.bayes, one.linear, three.linear)
	}
}
