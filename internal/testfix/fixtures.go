package testfix

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Path is the path of a file of the repository given from its root, for
// a test of any package.
func Path(rel string) string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..", filepath.FromSlash(rel))
}

// Digits reads examples/data/digits.csv by hand (not through psgraph's
// parser, which tests compare with it): 64 pixels and a label per row.
func Digits(tb testing.TB) ([][]float64, []int) {
	tb.Helper()
	f, err := os.Open(Path("examples/data/digits.csv"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var xs [][]float64
	var ys []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(strings.TrimSpace(sc.Text()), ",")
		if len(fields) != 65 {
			continue
		}
		row := make([]float64, 64)
		for j := range row {
			row[j], _ = strconv.ParseFloat(fields[j], 64)
		}
		y, _ := strconv.Atoi(fields[64])
		xs, ys = append(xs, row), append(ys, y)
	}
	return xs, ys
}

// TinyModel is a softmax regression of 3 classes over 4 synthetic
// features: the smallest model that trains, splits and serves.
const TinyModel = `psgraph: 1
name: tiny
data:
  synthetic: {rows: 64, features: 4, classes: 3, seed: 7}
  features: {name: x}
  label: {name: y}
params:
  W: {shape: [4, 3], init: {type: xavier_uniform, seed: 1}}
  b: {shape: [3]}
ops:
  - {type: matmul, inputs: [x, W], outputs: [z]}
  - {type: add, inputs: [z, b], outputs: [logits]}
  - {type: softmax_cross_entropy, inputs: [logits, y], outputs: [loss]}
  - {type: accuracy, inputs: [logits, y], outputs: [acc]}
train:
  loss: loss
  metrics: [acc]
  batch: 16
  steps: 1000
  optimizer: {type: momentum, lr: 0.05}
`

// CTRModel is a small click-through-rate model over a Criteo-format file
// train.tsv beside it (psgraph gen criteo): the 26 categorical columns
// hashed into one table of buckets rows of 4, the 13 integer columns
// log-transformed and normalized, a linear layer over both, trained with
// adagrad; stream: the file is streamed rather than loaded.
func CTRModel(buckets, batch, steps int, stream bool) string {
	s := ctrModel
	for _, r := range [][2]string{{"BUCKETS", strconv.Itoa(buckets)}, {"BATCH", strconv.Itoa(batch)}, {"STEPS", strconv.Itoa(steps)}} {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	if stream {
		return strings.Replace(s, "  normalize: standard\n", "  normalize: standard\n  stream: true\n", 1)
	}
	return s
}

const ctrModel = `psgraph: 1
name: ctr
data:
  csv: train.tsv
  delimiter: tab
  label: {name: y, column: 0}
  features: {name: dense, columns: [1, 14], fill: 0, transform: log}
  ids: {name: cat, columns: [14, 40], hash_buckets: BUCKETS}
  normalize: standard
params:
  emb: {shape: [BUCKETS, 4], init: {type: normal, std: 0.1, seed: 1}}
  We: {shape: [104, 2], init: {type: xavier_uniform, seed: 2}}
  Wd: {shape: [13, 2], init: {type: xavier_uniform, seed: 3}}
  b: {shape: [2]}
ops:
  - {type: lookup_table, inputs: [emb, cat], outputs: [e3]}
  - {type: reshape, inputs: [e3], outputs: [e], attrs: {shape: [-1, 104]}}
  - {type: matmul, inputs: [e, We], outputs: [ze]}
  - {type: matmul, inputs: [dense, Wd], outputs: [zd]}
  - {type: add, inputs: [ze, zd], outputs: [z]}
  - {type: add, inputs: [z, b], outputs: [logits]}
  - {type: softmax_cross_entropy, inputs: [logits, y], outputs: [loss]}
  - {type: accuracy, inputs: [logits, y], outputs: [acc]}
train:
  loss: loss
  metrics: [acc]
  batch: BATCH
  steps: STEPS
  optimizer: {type: adagrad, lr: 0.1}
`
