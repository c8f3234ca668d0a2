package job

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/trainer"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/data"
)

// TestPredictDefaultOutputs: a sigmoid_cross_entropy model's default
// output is prob, sigmoid(x W + b); an mse model's is its prediction,
// x W + b, with x normalized by the mean and std of the data, computed by
// hand. The mse model's parameter file has no statistics (as an older
// psgraph wrote it): predict says so and computes them again.
func TestPredictDefaultOutputs(t *testing.T) {
	dir := t.TempDir()
	var csv strings.Builder
	var rows [][3]float64
	for i := 0; i < 50; i++ {
		a, b := float64(i%7)-3, float64(i%5)*0.5
		y := 0.0
		if a+b > 0 {
			y = 1
		}
		rows = append(rows, [3]float64{a, b, y})
		fmt.Fprintf(&csv, "%g,%g,%g\n", a, b, y)
	}
	if err := os.WriteFile(filepath.Join(dir, "d.csv"), []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	model := func(name, normalize, loss, out string) string {
		y := fmt.Sprintf(`psgraph: 1
data:
  csv: d.csv
  features: {name: xt, columns: [0, 3]}
  normalize: %s
params:
  W: {shape: [2, 1], init: {type: normal, std: 0.5, seed: 3}}
  b: {shape: [1]}
ops:
  - {type: slice_rows, inputs: [xt], outputs: [x], attrs: {start: 0, end: 2, axis: 1}}
  - {type: slice_rows, inputs: [xt], outputs: [t], attrs: {start: 2, end: 3, axis: 1}}
  - {type: matmul, inputs: [x, W], outputs: [z]}
  - {type: add, inputs: [z, b], outputs: [%s]}
  - {type: %s, inputs: [%s, t], outputs: [loss]}
train: {loss: loss, batch: 10, steps: 20, optimizer: {type: sgd, lr: 0.1}}
`, normalize, out, loss, out)
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, c := range []struct {
		loss, out, normalize, column string
		f                            func(float64) float64
	}{
		{"sigmoid_cross_entropy", "logits", "none", "prob", func(z float64) float64 { return 1 / (1 + math.Exp(-z)) }},
		{"mse", "yhat", "standard", "yhat", func(z float64) float64 { return z }},
	} {
		g := load(t, model(c.out, c.normalize, c.loss, c.out))
		save := filepath.Join(dir, c.out+".safetensors")
		if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Save: save, Log: zerolog.Nop()}); err != nil {
			t.Fatal(err)
		}
		p, _, err := modelfile.LoadSafetensors(save)
		if err != nil {
			t.Fatal(err)
		}
		mean, std := []float64{0, 0, 0}, []float64{1, 1, 1}
		var log bytes.Buffer
		if c.normalize == "standard" {
			if err := modelfile.SaveSafetensors(save, p, nil); err != nil { // no statistics
				t.Fatal(err)
			}
			for j := range 3 {
				mean[j], std[j] = 0, 0
				for _, r := range rows {
					mean[j] += r[j] / float64(len(rows))
				}
				for _, r := range rows {
					std[j] += (r[j] - mean[j]) * (r[j] - mean[j]) / float64(len(rows))
				}
				std[j] = math.Sqrt(std[j])
			}
		}
		out := filepath.Join(dir, c.out+".csv")
		res, err := evaluate.Predict(context.Background(), g, evaluate.PredictOptions{InitFrom: save, Data: filepath.Join(dir, "d.csv"), Out: out, Log: zerolog.New(&log)})
		if err != nil {
			t.Fatal(err)
		}
		if warned := strings.Contains(log.String(), "no normalization statistics"); warned != (c.normalize == "standard") {
			t.Errorf("%s: warned about missing statistics: %v; log %q", c.loss, warned, log.String())
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		if lines[0] != c.column || len(res.Columns) != 1 || res.Rows != len(rows) || len(lines) != len(rows)+1 {
			t.Fatalf("%s: header %q, %d lines, result %+v; want column %q and %d rows", c.loss, lines[0], len(lines), res, c.column, len(rows))
		}
		W, b := p["W"].F, p["b"].F
		for i, r := range rows {
			z := float64(b[0])
			for j := range 2 {
				z += float64(float32((r[j]-mean[j])/std[j])) * float64(W[j])
			}
			got, _ := strconv.ParseFloat(lines[i+1], 64)
			if want := c.f(z); math.Abs(got-want) > 1e-5*math.Max(1, math.Abs(want)) {
				t.Fatalf("%s row %d: %s %v, by hand %v", c.loss, i, c.column, got, want)
			}
		}
	}
}

// readBytes is the bytes this process has read through read system calls
// (Linux's /proc/self/io rchar).
func readBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no rchar in /proc/self/io")
	return 0
}

// Predict reads its input once, in chunks, with a shorter last chunk: the
// bytes the process reads while it predicts are about the file's size, not
// twice it (opening the stream reads one buffer more), and every row gets
// its line.
func TestPredictReadsTheFileOnce(t *testing.T) {
	dir := t.TempDir()
	var small, big strings.Builder
	for i := range 50 {
		fmt.Fprintf(&small, "%d,%g,%d\n", i%7-3, float64(i%5)*0.5, (i%7+i%5)%2)
	}
	const rows = 500_003 // 3.6 MB, not a multiple of the chunk
	for i := range rows {
		fmt.Fprintf(&big, "%d,%g,%d\n", i%7-3, float64(i%5)*0.5, (i%7+i%5)%2)
	}
	for name, s := range map[string]string{"d.csv": small.String(), "big.csv": big.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(path, []byte(`psgraph: 1
data:
  csv: d.csv
  features: {name: x, columns: [0, 2]}
  label: {name: y, column: 2, dtype: float32}
params:
  W: {shape: [2, 1], init: {type: normal, std: 0.5, seed: 3}}
ops:
  - {type: matmul, inputs: [x, W], outputs: [z]}
  - {type: sigmoid_cross_entropy, inputs: [z, y], outputs: [loss]}
train: {loss: loss, batch: 10, steps: 5, optimizer: {type: sgd, lr: 0.1}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	g := load(t, path)
	save := filepath.Join(dir, "m.safetensors")
	if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Save: save, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "p.csv")
	before := readBytes(t)
	res, err := evaluate.Predict(context.Background(), g, evaluate.PredictOptions{InitFrom: save, Data: filepath.Join(dir, "big.csv"), Out: out, Log: zerolog.Nop()})
	read := readBytes(t) - before
	if err != nil {
		t.Fatal(err)
	}
	size := int64(big.Len())
	// Opening the stream reads its first buffer to learn the row width.
	if read < size || read > size+data.StreamBuffer+1<<20 {
		t.Errorf("predicting a %d-byte file read %d bytes; want it read once", size, read)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != rows || strings.Count(string(raw), "\n") != rows+1 {
		t.Errorf("%d rows predicted, %d lines written; want %d and a header", res.Rows, strings.Count(string(raw), "\n"), rows)
	}
}

// predict's JSON summary names the number of columns and the first few,
// so its line stays short for a wide output (a DLRM's features have
// hundreds): digits' hidden layer h writes 128 columns, the header line
// has them all, the summary 8 names in under 200 bytes.
func TestPredictSummaryStaysShort(t *testing.T) {
	g := load(t, "../../examples/digits-mlp.yaml")
	dir := t.TempDir()
	save := filepath.Join(dir, "digits.safetensors")
	if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 2, Save: save, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		outputs []string
		columns int
		first   []string
	}{
		{[]string{"h"}, 128, []string{"h_0", "h_1", "h_2", "h_3", "h_4", "h_5", "h_6", "h_7"}},
		{[]string{"pred"}, 1, []string{"pred"}},
	} {
		out := filepath.Join(dir, "out.csv")
		res, err := evaluate.Predict(context.Background(), g, evaluate.PredictOptions{InitFrom: save, Data: "../../examples/data/digits.csv", Out: out, Outputs: c.outputs, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		js, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Out          string   `json:"out"`
			Rows         int      `json:"rows"`
			Columns      int      `json:"columns"`
			FirstColumns []string `json:"first_columns"`
		}
		if err := json.Unmarshal(js, &got); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		header := strings.Split(string(raw[:bytes.IndexByte(raw, '\n')]), ",")
		t.Logf("%v: %d bytes: %s", c.outputs, len(js), js)
		if got.Out != out || got.Rows != 1797 || got.Columns != c.columns || len(header) != c.columns || fmt.Sprint(got.FirstColumns) != fmt.Sprint(c.first) || fmt.Sprint(header[:len(c.first)]) != fmt.Sprint(c.first) {
			t.Errorf("summary %s, header of %d columns; want %d rows, %d columns, first %v", js, len(header), 1797, c.columns, c.first)
		}
		if len(js) > 200 {
			t.Errorf("the summary line is %d bytes: %s", len(js), js)
		}
	}
}
