package dsl

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/psgraph/psgraph/exec/data/criteo"
)

func TestMarshalRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("../examples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no examples found")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			f := withGeneratedData(t, f)
			g, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			out, err := Marshal(g)
			if err != nil {
				t.Fatal(err)
			}
			back, err := LoadBytes(f, out)
			if err != nil {
				t.Fatalf("reading back: %v\n%s", err, out)
			}
			if d := Diff(g, back); d != "" {
				t.Fatalf("round trip differs: %s\n%s", d, out)
			}
			again, err := Marshal(back)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, again) {
				t.Fatalf("output is not stable:\n%s\nvs\n%s", out, again)
			}
		})
	}
}

// withGeneratedData returns the path of an example model to load. The
// CTR-shaped examples read files that psgraph gen criteo writes and git
// ignores (examples/README.md): data/NAME.tsv, as data.csv and data.eval's
// csv. When one of them is absent, the model is loaded from a copy beside
// small generated files of those names (with the FM truth and a history
// column, so every example's columns are there).
func withGeneratedData(t *testing.T, model string) string {
	t.Helper()
	src := mustRead(t, model)
	var missing []string
	for _, m := range dataFileRef.FindAllSubmatch(src, -1) {
		name := string(m[1])
		if _, err := os.Stat(filepath.Join(filepath.Dir(model), "data", name)); err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return model
	}
	dir := t.TempDir()
	var b bytes.Buffer
	if _, err := criteo.Generate(&b, criteo.Options{Rows: 100, Seed: 1, Truth: "fm", History: 8}); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range missing {
		if err := os.WriteFile(filepath.Join(dir, "data", name), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(dir, filepath.Base(model))
	if err := os.WriteFile(dst, src, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// dataFileRef finds the generated data files a model reads: csv: data/NAME.tsv.
var dataFileRef = regexp.MustCompile(`csv: data/([\w.-]+\.tsv)`)

func TestMarshalUnexpanded(t *testing.T) {
	g, err := Parse("../examples/digits-mlp.yaml", mustRead(t, "../examples/digits-mlp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "optimizer: {type: sgd, lr: 0.1}") {
		t.Fatalf("built-in optimizer not written:\n%s", out)
	}
	back, err := LoadBytes("../examples/digits-mlp.yaml", out)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Load("../examples/digits-mlp.yaml")
	if d := Diff(want, back); d != "" {
		t.Fatal(d)
	}
}

// TestMarshalUnexpandedScheduleAndClip: an lr schedule, weight decay and
// train.clip are written back and read into the same expanded model.
func TestMarshalUnexpandedScheduleAndClip(t *testing.T) {
	src := strings.Replace(string(mustRead(t, "../testdata/optim/mlp-adam-warmup-cosine.yaml")),
		"  optimizer: {type: adam, lr: {value: 0.01, schedule: cosine, warmup: 10}}",
		"  clip: {value: 2, norm: 3}\n  optimizer: {type: adam, weight_decay: 0.1, lr: {value: 0.01, schedule: cosine, warmup: 10, steps: 40, min_lr: 0.001}}", 1)
	g, err := Parse("../testdata/optim/m.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"clip: {value: 2.0, norm: 3.0}", "lr: {value: 0.01, schedule: cosine, warmup: 10, steps: 40, min_lr: 0.001}", "weight_decay: 0.1"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("%q not written:\n%s", want, out)
		}
	}
	back, err := LoadBytes("../testdata/optim/m.yaml", out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := LoadBytes("../testdata/optim/m.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(want, back); d != "" {
		t.Fatal(d)
	}
}

func TestBlockVarRoundTripAndErrors(t *testing.T) {
	src := `psgraph: 1
params:
  W.b1: {shape: [3, 4], init: {type: normal, seed: 3}, block: {of: W, rows: [2, 5], shape: [5, 4]}}
`
	g, err := LoadBytes("m.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	name, full, row, step := g.Vars["W.b1"].InitTarget()
	if name != "W" || !full.Equal([]int{5, 4}) || row != 2 || step != 1 {
		t.Fatalf("InitTarget = %s %v %d", name, full, row)
	}
	out, _ := Marshal(g)
	back, err := LoadBytes("m.yaml", out)
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(g, back); d != "" {
		t.Fatal(d)
	}
	for _, c := range []struct{ block, want string }{
		{`{of: W, rows: [2, 5], shape: [4, 4]}`, "m.yaml:3:"},
		{`{of: W, rows: [2, 4], shape: [5, 4]}`, "m.yaml:3:9: params.W.b1.shape [3, 4] does not match its block"},
		{`{of: W, rows: [5, 2], shape: [5, 4]}`, "m.yaml:3:"},
		{`{rows: [2, 5], shape: [5, 4]}`, "needs of"},
		{`{of: W, rows: [2, 5], shape: [5, 4], cols: 1}`, `unknown key "cols"`},
	} {
		bad := strings.Replace(src, `{of: W, rows: [2, 5], shape: [5, 4]}`, c.block, 1)
		_, err := LoadBytes("m.yaml", []byte(bad))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("block %s: got %v, want %q", c.block, err, c.want)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The data options of CTR files (delimiter, fill, transform, hash_buckets,
// stream; lists of features and ids specs, shared_space, num_ids,
// multi-valued columns) and the held-out data (data.eval, train.eval_every) survive
// Marshal and Load, as a split plan's trainer.yaml needs.
func TestMarshalRoundTripDataOptions(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "train.tsv"), []byte("1\t2\t\tab\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{
		"  delimiter: tab\n  label: {name: y, column: 0}\n  features: {name: x, columns: [1, 3], fill: -1.5, transform: log}\n  ids: {name: c, columns: [3, 4], hash_buckets: 1000}\n  normalize: standard\n  stream: true\n",
		"  delimiter: \"\\t\"\n  ids: {name: c, columns: [1, 3], fill: 7}\n",
		"  delimiter: \";\"\n  features: {name: x, columns: [0, 1]}\n",
		"  delimiter: tab\n  label: {name: y, column: 0}\n  eval: {fraction: 0.25}\ntrain: {batch: 4, eval_every: 5}\n",
		"  delimiter: tab\n  label: {name: y, column: 0}\n  seed: 3\n  eval: {fraction: 0.25, stratify: true, seed: 8}\n",
		"  delimiter: tab\n  label: {name: y, column: 0}\n  eval: {csv: train.tsv}\n  stream: true\n",
		"  delimiter: tab\n  label: {name: y, column: 0}\n  features:\n    - {name: a, columns: [1, 2]}\n    - {name: b, columns: [2, 3], fill: 0, transform: log}\n" +
			"  ids:\n    - {name: c, columns: [1, 3], fill: 7, num_ids: 100}\n    - {name: d, column: 3, hash_buckets: 1000, shared_space: true, separator: \"|\", max_len: 5}\n    - {name: e, columns: [3, 4], hash_buckets: 10}\n",
		"  delimiter: tab\n  ids:\n    - {name: c, column: 3, separator: \";\", max_len: 2}\n",
		"  delimiter: tab\n  ids:\n    - {name: k, columns: [1, 3], key: hash64, shared_space: true}\n    - {name: u, column: 3, key: int64, fill: -9223372036854775807}\n" +
			"    - {name: h, column: 3, key: hash64, separator: \"|\", max_len: 4}\n    - {name: v, column: 1, key: int64, separator: \";\", max_len: 2}\n",
		"  delimiter: tab\n  names: [y, a, b, c]\n  label: {name: y, column: y, positive: [\"1\", yes]}\n  features: {name: x, columns: [b, a]}\n" +
			"  ids:\n    - {name: u, column: c, key: uint64}\n    - {name: v, columns: a..c, vocab: {min_count: 3, max_size: 10, oov_buckets: 2}}\n    - {name: w, columns: [c, 1], vocab: {file: train.tsv}}\n",
		"  delimiter: tab\n  label: {name: y, column: 0, threshold: 0.5, dtype: float32}\n  features: {name: x, columns: [3, 1..2, 0]}\n",
		"  delimiter: tab\n  label: {name: y, column: 2, vocab: {min_count: 1}}\n",
	} {
		path := filepath.Join(dir, "m.yaml")
		g, err := LoadBytes(path, []byte("psgraph: 1\ndata:\n  csv: train.tsv\n"+data))
		if err != nil {
			t.Fatal(err)
		}
		out, err := Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		back, err := LoadBytes(path, out)
		if err != nil {
			t.Fatalf("reading back: %v\n%s", err, out)
		}
		if d := Diff(g, back); d != "" {
			t.Errorf("round trip differs: %s\n%s", d, out)
		}
		if again, _ := Marshal(back); !bytes.Equal(out, again) {
			t.Errorf("output is not stable:\n%s\nvs\n%s", out, again)
		}
	}
}

// chunkWriter records the sizes of the writes it gets.
type chunkWriter struct {
	bytes.Buffer
	sizes []int
	fail  error
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	if w.fail != nil {
		return 0, w.fail
	}
	w.sizes = append(w.sizes, len(p))
	return w.Buffer.Write(p)
}

// Encode writes what Marshal returns, in pieces of about encodeChunk
// bytes (so split's memory does not grow with a subgraph's size), and
// stops at its writer's first error.
func TestEncodeEqualsMarshal(t *testing.T) {
	g, err := LoadBytes("deep.yaml", []byte(deepModel(3000)))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 4*encodeChunk {
		t.Fatalf("the model is %d bytes, too small to be written in pieces", len(want))
	}
	var w chunkWriter
	if err := Encode(&w, g); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.Bytes(), want) {
		t.Fatalf("Encode differs from Marshal:\n%s", firstLineDiff(string(w.Bytes()), string(want)))
	}
	if len(w.sizes) < len(want)/encodeChunk {
		t.Errorf("%d writes for %d bytes, want one about every %d bytes", len(w.sizes), len(want), encodeChunk)
	}
	for _, n := range w.sizes {
		if n > encodeChunk+4096 {
			t.Errorf("a write of %d bytes; Encode should hand over about %d at a time", n, encodeChunk)
		}
	}
	bad := &chunkWriter{fail: os.ErrClosed}
	if err := Encode(bad, g); err != os.ErrClosed {
		t.Errorf("Encode to a failing writer returned %v, want its error", err)
	}
}

func firstLineDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return "line " + la[i] + "\nwant " + lb[i]
		}
	}
	return "one is a prefix of the other"
}

// Numbers are written as the shortest decimal that reads back the same,
// always recognizable as a float.
func TestFormatFloat(t *testing.T) {
	for f, want := range map[float64]string{
		1: "1.0", -3: "-3.0", 0: "0.0", 0.5: "0.5", 0.001: "0.001", 1e21: "1.0e+21",
		1.5e-07: "1.5e-07", 1e-7: "1.0e-07", 123456789: "1.23456789e+08", 2.5e+30: "2.5e+30",
	} {
		if got := formatFloat(f); got != want {
			t.Errorf("formatFloat(%v) = %q, want %q", f, got, want)
		}
	}
}

// YAMLString writes names plain and quotes what YAML would read as
// something else: reserved words in any case, numbers, punctuation.
func TestYAMLStringReadsBack(t *testing.T) {
	plainWords := []string{"W1", "m3", "lr", "fc1.w@GRAD", "bw.x/y-z", "Trainer", "yesterday", "ON_", "n1", "info"}
	quoted := []string{"", "true", "False", "NULL", "yes", "No", "on", "OFF", "y", "N", "nan", "Inf", "1", "1e3", "-x", "a b", "a:b", "#c", "[x]"}
	for _, s := range append(plainWords, quoted...) {
		out := YAMLString(s)
		var back map[string]any
		if err := yaml.Unmarshal([]byte("k: "+out+"\nl: ["+out+"]\n"), &back); err != nil {
			t.Fatalf("%q written as %s: %v", s, out, err)
		}
		if back["k"] != s || !reflect.DeepEqual(back["l"], []any{s}) {
			t.Errorf("%q written as %s reads back as %#v and %#v", s, out, back["k"], back["l"])
		}
	}
	for _, s := range plainWords {
		if out := YAMLString(s); out != s {
			t.Errorf("YAMLString(%q) = %s, want it plain", s, out)
		}
	}
}

// The default attributes NewOp shares among ops without attributes of
// their own stay as the catalog gives them after every example is
// expanded and written.
func TestSharedDefaultsUnchanged(t *testing.T) {
	files, _ := filepath.Glob("../examples/*.yaml")
	for _, f := range files {
		g, err := Load(withGeneratedData(t, f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Marshal(g); err != nil {
			t.Fatal(err)
		}
	}
	for typ, shared := range sharedDefaults {
		if !reflect.DeepEqual(shared, DefaultAttrs(typ, 0)) {
			t.Errorf("the shared defaults of %s changed: %v", typ, shared)
		}
	}
	if op := NewOp("matmul", []string{"a", "b"}, []string{"c"}, nil, Backward, Pos{}); !reflect.DeepEqual(op.Attrs, DefaultAttrs("matmul", 0)) {
		t.Errorf("NewOp without attributes has %v, want matmul's defaults", op.Attrs)
	}
}
