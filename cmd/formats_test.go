package cmd_test

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/internal/testfix"
)

// criteoModel is a small CTR model over DeepCTR's Criteo layout (label,
// I1..I13, C1..C26) read from source (the data keys naming the file).
func criteoModel(source string) string {
	return `psgraph: 1
name: criteo-formats
data:
` + source + `
  label: {name: click, column: label, threshold: 0.5}
  features: {name: dense, columns: I1..I13}
  ids: {name: cat, columns: C1..C26, hash_buckets: 1000}
params:
  emb: {shape: [1000, 4], init: {type: normal, std: 0.01, seed: 1}}
  W0: {shape: [117, 2], init: {type: xavier_uniform, seed: 2}}
  b0: {shape: [2]}
ops:
  - {type: lookup_table, inputs: [emb, cat], outputs: [e3]}
  - {type: reshape, inputs: [e3], outputs: [e], attrs: {shape: [-1, 104]}}
  - {type: concat, inputs: [e, dense], outputs: [x], attrs: {axis: 1}}
  - {type: matmul, inputs: [x, W0], outputs: [m]}
  - {type: add, inputs: [m, b0], outputs: [logits]}
  - {type: softmax_cross_entropy, inputs: [logits, click], outputs: [loss]}
  - {type: auc, inputs: [logits, click], outputs: [auc]}
train:
  loss: loss
  metrics: [auc]
  batch: 40
  steps: 25
  optimizer: {type: adagrad, lr: 0.05}
`
}

// A model over DeepCTR's Criteo sample as TFRecords (gen_tfrecords.py's
// layout: label-encoded sparse features as int64_list, min-max scaled
// dense ones and the label as float_list; written by an independent
// writer) trains to the parameters the same model trains to over the CSV
// the records were made from (within float32 rounding), locally and in a
// 2x2 job; eval and predict read any format's file by column name (a
// gzipped TFRecord, the CSV, a Parquet file DuckDB wrote, one without the
// label to predict) to the same loss and predictions.
func TestTFRecordModelMatchesCSVModel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testfix.WriteTFRecord(t, "criteo", testfix.DeepCTR(t, dir, "criteo_sample.txt"), dir)
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tf := write("tf.yaml", criteoModel("  tfrecord: criteo.tfrecords"))
	csv := write("csv.yaml", criteoModel("  csv: criteo_encoded.csv\n  header: true"))
	run := func(model, save string, args ...string) map[string]any {
		t.Helper()
		r := psgraph(t, append([]string{"run", "--role", "local", model, "--save", save}, args...)...)
		if r.code != 0 {
			t.Fatalf("run %s: exit %d\n%s", model, r.code, r.stderr)
		}
		return summary(t, r)
	}
	tfParams, csvParams := filepath.Join(dir, "tf.safetensors"), filepath.Join(dir, "csv.safetensors")
	run(tf, tfParams)
	run(csv, csvParams)
	equalParams(t, tfParams, csvParams, "the tfrecord and the CSV model")

	// A 2x2 job over the TFRecords trains as one node with the combined batch.
	local := filepath.Join(dir, "local.safetensors")
	run(tf, local, "--batch", "40")
	dist := filepath.Join(dir, "dist.safetensors")
	if r := psgraph(t, "train", tf, "--trainers", "2", "--pservers", "2", "--batch", "20", "--save", dist); r.code != 0 {
		t.Fatalf("train: exit %d\n%s", r.code, r.stderr)
	}
	equalToLocal(t, local, dist, "2x2 sync over tfrecords")

	files := []string{"criteo.tfrecords", "criteo.tfrecords.gz", "criteo_encoded.csv"}
	if testfix.DuckDBNode() != "" {
		enc := filepath.Join(dir, "criteo_encoded.csv")
		testfix.WriteParquet(t, filepath.Join(dir, "criteo.parquet"), 64, "SELECT * FROM read_csv('"+enc+"')")
		testfix.WriteParquet(t, filepath.Join(dir, "nolabel.parquet"), 64, "SELECT * EXCLUDE (label) FROM read_csv('"+enc+"')")
		files = append(files, "criteo.parquet")
		pq := filepath.Join(dir, "pq.safetensors")
		run(write("pq.yaml", criteoModel("  parquet: criteo.parquet")), pq)
		equalParams(t, pq, csvParams, "the parquet and the CSV model")
	}
	var loss any
	for _, f := range files {
		r := psgraph(t, "eval", tf, "--init-from", tfParams, "--data", filepath.Join(dir, f))
		if r.code != 0 {
			t.Fatalf("eval --data %s: exit %d\n%s", f, r.code, r.stderr)
		}
		s := summary(t, r)
		if s["rows"] != 200.0 || loss != nil && s["loss"] != loss {
			t.Errorf("eval --data %s: %v rows, loss %v; the tfrecords' loss %v over 200 rows", f, s["rows"], s["loss"], loss)
		}
		loss = s["loss"]
	}
	predict := func(data string) string {
		t.Helper()
		out := filepath.Join(dir, "pred-"+filepath.Base(data)+".csv")
		if r := psgraph(t, "predict", tf, "--init-from", tfParams, "--data", data, "-o", out); r.code != 0 {
			t.Fatalf("predict --data %s: exit %d\n%s", data, r.code, r.stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	want := predict(filepath.Join(dir, "criteo.tfrecords"))
	if n := strings.Count(want, "\n"); n != 201 {
		t.Fatalf("predictions: %d lines, want a header and 200 rows", n)
	}
	others := []string{"criteo_encoded.csv", "criteo.tfrecords.gz"}
	if testfix.DuckDBNode() != "" {
		others = append(others, "nolabel.parquet")
	}
	for _, f := range others {
		if got := predict(filepath.Join(dir, f)); got != want {
			t.Errorf("predictions from %s differ from the tfrecords':\n%.200s\nwant\n%.200s", f, got, want)
		}
	}
}

// equalParams checks two saved parameter files hold the same tensors to
// within float32 rounding.
func equalParams(t *testing.T, a, b, what string) {
	t.Helper()
	x, y := readTensors(t, a), readTensors(t, b)
	if len(x) == 0 || len(x) != len(y) {
		t.Fatalf("%s: %d and %d tensors", what, len(x), len(y))
	}
	for name, v := range x {
		if d := rel(v, y[name]); d > 1e-6 {
			t.Errorf("%s: %s differs by %.2g (relative), want <= 1e-6", what, name, d)
		}
	}
}

// Each model of examples/formats (look-alikes of DeepCTR's sample files:
// quoted CSV, a headerless file with names, string labels, vocabularies,
// uint64 keys, TFRecord, Parquet) trains, evaluates and predicts its own
// file as docs/dsl.md shows, and docs/dsl.md holds its data section as the
// file has it.
func TestDocsDataExamplesRun(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/dsl.md")
	if err != nil {
		t.Fatal(err)
	}
	models, _ := filepath.Glob("../examples/formats/*.yaml")
	if len(models) < 6 {
		t.Fatalf("examples/formats holds %d models, want 6", len(models))
	}
	dir := t.TempDir()
	for _, m := range models {
		src, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		text := string(src)
		section := text[strings.Index(text, "data:\n"):strings.Index(text, "params:\n")]
		name := strings.TrimSuffix(filepath.Base(m), ".yaml")
		if name != "criteo-csv" && !strings.Contains(string(doc), "```yaml\n"+section+"```") {
			t.Errorf("docs/dsl.md does not show the data section of %s as the file has it:\n%s", m, section)
		}
		model := "examples/formats/" + name + ".yaml"
		params := filepath.Join(dir, name+".safetensors")
		if r := psgraph(t, "run", "--role", "local", model, "--steps", "10", "--save", params); r.code != 0 {
			t.Errorf("run %s: exit %d\n%s", model, r.code, r.stderr)
			continue
		}
		r := psgraph(t, "eval", model, "--init-from", params)
		if rows, _ := summary(t, r)["rows"].(float64); r.code != 0 || rows < 40 {
			t.Errorf("eval %s: exit %d, %v rows\n%s", model, r.code, rows, r.stderr)
		}
		file := strings.Fields(strings.SplitN(section, "\n", 3)[1])[1] // the source key's file
		out := filepath.Join(dir, name+".csv")
		r = psgraph(t, "predict", model, "--init-from", params, "--data", "examples/formats/"+file, "-o", out)
		if rows, _ := summary(t, r)["rows"].(float64); r.code != 0 || rows != 200 {
			t.Errorf("predict %s: exit %d, %v rows, want 200\n%s", model, r.code, rows, r.stderr)
		}
	}
}

// predict --keep writes columns of the data file first on each row, as
// the file has them, so predictions join back to their rows: Avazu's
// 64-bit ids, MovieLens titles with commas (quoted again), a TFRecord
// feature the model does not read (the label, left out of a prediction);
// each row's kept fields are the file's, read here with encoding/csv.
func TestPredictKeepsColumns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		model, data string
		keep        []string
	}{
		{"avazu", "avazu_sample.txt", []string{"id", "hour"}},
		{"movielens", "movielens_sample.txt", []string{"title", "user_id"}},
	} {
		model := "examples/formats/" + c.model + ".yaml"
		params := filepath.Join(dir, c.model+".safetensors")
		if r := psgraph(t, "run", "--role", "local", model, "--steps", "5", "--save", params); r.code != 0 {
			t.Fatalf("run %s: exit %d\n%s", model, r.code, r.stderr)
		}
		out := filepath.Join(dir, c.model+".csv")
		r := psgraph(t, "predict", model, "--init-from", params, "--data", "examples/formats/"+c.data, "-o", out, "--keep", strings.Join(c.keep, ","))
		if r.code != 0 {
			t.Fatalf("predict --keep: exit %d\n%s", r.code, r.stderr)
		}
		in := readCSV(t, "../examples/formats/"+c.data)
		got := readCSV(t, out)
		if len(got) != len(in) || !slices.Equal(got[0][:len(c.keep)], c.keep) {
			t.Fatalf("%s: %d lines, header %v; want %d lines, header %v first", c.model, len(got), got[0], len(in), c.keep)
		}
		for i := 1; i < len(in); i++ {
			for j, name := range c.keep {
				if want := in[i][slices.Index(in[0], name)]; got[i][j] != want {
					t.Fatalf("%s row %d: kept %s %q, the file's %q", c.model, i, name, got[i][j], want)
				}
			}
		}
	}
	// A TFRecord's label, which prediction does not read, kept: the
	// records' labels in order (the CSV they were made from has them).
	testfix.WriteTFRecord(t, "criteo", testfix.DeepCTR(t, dir, "criteo_sample.txt"), dir)
	model := "examples/formats/criteo-tfrecord.yaml"
	params := filepath.Join(dir, "tf.safetensors")
	if r := psgraph(t, "run", "--role", "local", model, "--steps", "5", "--save", params); r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	out := filepath.Join(dir, "tf.csv")
	if r := psgraph(t, "predict", model, "--init-from", params, "--data", filepath.Join(dir, "criteo.tfrecords"), "-o", out, "--keep", "label"); r.code != 0 {
		t.Fatalf("predict --keep label: exit %d\n%s", r.code, r.stderr)
	}
	enc, got := readCSV(t, filepath.Join(dir, "criteo_encoded.csv")), readCSV(t, out)
	for i := 1; i < len(enc); i++ {
		if w := strings.TrimSuffix(enc[i][0], ".0"); got[i][0] != w {
			t.Fatalf("row %d: kept label %q, the record's %q", i, got[i][0], w)
		}
	}
	census := filepath.Join(dir, "census.safetensors")
	if r := psgraph(t, "run", "--role", "local", "examples/formats/census.yaml", "--steps", "1", "--save", census); r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	r := psgraph(t, "predict", "examples/formats/census.yaml", "--init-from", census, "--data", "examples/formats/census-income.sample", "-o", out, "--keep", "idd")
	if r.code != 1 || !strings.Contains(r.stderr, `--keep idd: examples/formats/census-income.sample has no column "idd"; its columns are id, age,`) || !strings.Contains(r.stderr, `(did you mean "id"?)`) {
		t.Errorf("--keep of a missing column: exit %d\n%s", r.code, r.stderr)
	}
}

// readCSV reads a CSV file with encoding/csv (an independent reader).
func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
