package dsl

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl/ir"
)

// writeModel writes a model and its data file (data.csv) into a fresh
// directory and returns the model's path.
func writeModel(t *testing.T, model, csv string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data.csv"), []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(path, []byte(model), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const regressionCSV = "1,2,3,0.5,1\n4,5,6,1.5,0\n"

// regressionModel: features in columns 0-2, label spec and loss op given.
func regressionModel(label, loss string) string {
	return `psgraph: 1
data:
  csv: data.csv
  features: {name: x, columns: [0, 3]}
  label: ` + label + `
params:
  W: {shape: [3, 1]}
ops:
  - {type: matmul, inputs: [x, W], outputs: [pred]}
  - ` + loss + `
train: {loss: loss, batch: 2, steps: 1, optimizer: {type: sgd, lr: 0.1}}
`
}

func TestFloatLabelIsAFloatMatrix(t *testing.T) {
	for _, c := range []struct {
		label string
		shape ir.Shape
	}{
		{"{name: y, column: 3, dtype: float32}", ir.Shape{-1, 1}},
		{"{name: y, columns: [3, 5], dtype: float32}", ir.Shape{-1, 2}},
		{"{name: y, column: 4}", ir.Shape{-1}},
		{"{name: y, column: 4, dtype: int32}", ir.Shape{-1}},
	} {
		src := regressionModel(c.label, "{type: mean, inputs: [pred], outputs: [loss]}")
		g, err := Parse(writeModel(t, src, regressionCSV), []byte(src))
		if err != nil {
			t.Fatalf("%s: %v", c.label, err)
		}
		v := g.Vars["y"]
		want := ir.I32
		if strings.Contains(c.label, "float32") {
			want = ir.F32
		}
		if v.DType != want || !v.Shape.Equal(c.shape) {
			t.Errorf("%s: y is %s%v, want %s%v", c.label, v.DType, v.Shape, want, c.shape)
		}
	}
}

// A loss whose label dtype does not fit is refused at the op, with the
// label spec to write.
func TestLossRefusesLabelDType(t *testing.T) {
	for _, c := range []struct{ label, loss, want string }{
		{"{name: y, column: 3}", "{type: mse, inputs: [pred, y], outputs: [loss]}",
			`m.yaml:10:5: op mse reads "y", the data label, as its target, but the label is int32 class ids (data.label at `},
		{"{name: y, column: 3}", "{type: mse, inputs: [pred, y], outputs: [loss]}",
			`mse needs float32 targets: write label: {name: "y", column: 3, dtype: float32} in data`},
		{"{name: y, column: 4}", "{type: sigmoid_cross_entropy, inputs: [pred, y], outputs: [loss]}",
			`sigmoid_cross_entropy needs float32 targets: write label: {name: "y", column: 4, dtype: float32} in data`},
		{"{name: y, column: 4, dtype: float32}", "{type: softmax_cross_entropy, inputs: [pred, y], outputs: [loss]}",
			`m.yaml:10:5: op softmax_cross_entropy reads "y", the data label, as class ids, but the label is float32 targets`},
		{"{name: y, column: 4, dtype: float32}", "{type: softmax_cross_entropy, inputs: [pred, y], outputs: [loss]}",
			`softmax_cross_entropy needs int32 class ids [batch]: write label: {name: "y", column: 4} in data (without dtype)`},
	} {
		path := writeModel(t, regressionModel(c.label, c.loss), regressionCSV)
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with %s: got %v, want an error containing %q", c.loss, c.label, err, c.want)
		}
	}
	path := writeModel(t, regressionModel("{name: y, column: 3, dtype: float32}", "{type: mse, inputs: [pred, y], outputs: [loss]}"), regressionCSV)
	if _, err := Load(path); err != nil {
		t.Errorf("mse with a float label: %v", err)
	}
}

func TestIntLabelRefusesColumnsRange(t *testing.T) {
	path := writeModel(t, regressionModel("{name: y, columns: [3, 5]}", "{type: mean, inputs: [pred], outputs: [loss]}"), regressionCSV)
	_, err := Load(path)
	want := "m.yaml:5:29: data.label reads int32 class ids from one column; give column: N, or add dtype: float32"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
}

const headerCSV = "a,b,c,price,kind\n1,2,3,0.5,1\n4,5,6,1.5,0\n"

func headerModel(header, features, label string) string {
	return `psgraph: 1
data:
  csv: data.csv
` + header + `  features: {name: x, columns: ` + features + `}
  label: ` + label + `
params:
  W: {shape: [3, 1]}
ops:
  - {type: matmul, inputs: [x, W], outputs: [pred]}
  - {type: mse, inputs: [pred, y], outputs: [loss]}
train: {loss: loss, batch: 2, steps: 1, optimizer: {type: sgd, lr: 0.1}}
`
}

// With header: true the columns may be named; the graph written back holds
// their numbers and the header flag, and reads back the same.
func TestHeaderColumnsByName(t *testing.T) {
	path := writeModel(t, headerModel("  header: true\n", "[a, b, c]", `{name: y, column: price, dtype: float32}`), headerCSV)
	g, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	d := g.Data
	if !d.Header || !slices.Equal(d.Features[0].Cols, []int{0, 1, 2}) || !slices.Equal(d.Label.Cols, []int{3}) || !d.Label.Float {
		t.Fatalf("features %v, label %v float %v, header %v; want [0 1 2], [3] float, header", d.Features[0].Cols, d.Label.Cols, d.Label.Float, d.Header)
	}
	src, err := Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	back, err := LoadBytes(path, src)
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	if diff := Diff(g, back); diff != "" {
		t.Errorf("written and read back: %s\n%s", diff, src)
	}
	// Numbers still work with a header.
	if _, err := Load(writeModel(t, headerModel("  header: true\n", "[0, 3]", `{name: y, column: 3, dtype: float32}`), headerCSV)); err != nil {
		t.Errorf("numbered columns with a header: %v", err)
	}
}

func TestHeaderErrors(t *testing.T) {
	for _, c := range []struct{ header, features, label, want string }{
		{"", "[a, b, c]", "{name: y, column: 3, dtype: float32}",
			`m.yaml:4:32: data.features.columns names column "a", but the file has no names to find it in; add header: true to data (the first line names the columns) or names: [...]`},
		{"  header: true\n", "[a, b, cc]", "{name: y, column: 3, dtype: float32}",
			`m.yaml:5:32: data.features.columns: ` + "%DIR%" + `/data.csv has no column "cc" in its header (line 1) (did you mean "c"?); its columns are a, b, c, price, kind`},
		{"  header: true\n", "c..a", "{name: y, column: 3, dtype: float32}",
			`m.yaml:5:32: data.features.columns: the range c..a runs backwards: "c" is column 2 of ` + "%DIR%" + `/data.csv and "a" column 0; write a..c`},
		{"  header: true\n", "[a, 1..b]", "{name: y, column: 3, dtype: float32}",
			`m.yaml:5:36: data.features.columns: "1..b" mixes a name and a number; give both ends by name or both by number`},
		{"  header: true\n", "[a]", "{name: y, columns: [price, kind]}",
			`data.label reads int32 class ids from one column; give column: N, or add dtype: float32`},
		{"  header: true\n", "[a]", "{name: y, column: price, positive: x, threshold: 3}",
			`data.label has positive (line 6) and threshold; give one mapping of the label's values`},
		{"", "[0, 1]", "{name: y, column: 3, dtype: float32}\n  names: [a, b, a]",
			`data.names names "a" twice; every column needs a name of its own`},

		{"  header: true\n", "[0, 3]", "{name: y, column: prise, dtype: float32}",
			`has no column "prise" in its header (line 1) (did you mean "price"?)`},
		{"  header: 1\n", "[0, 3]", "{name: y, column: 3, dtype: float32}",
			"m.yaml:4:11: data.header must be true or false"},
		{"", "[0, 3]", "{name: y, column: 3, dtype: float64}",
			`m.yaml:5:38: data.label.dtype "float64" is not int32 (class ids, the default) or float32`},
	} {
		path := writeModel(t, headerModel(c.header, c.features, c.label), headerCSV)
		want := strings.ReplaceAll(c.want, "%DIR%", filepath.Dir(path))
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("features %s, label %s: got %v\nwant an error containing %q", c.features, c.label, err, want)
		}
	}
}

func TestEpochsOrSteps(t *testing.T) {
	base := regressionModel("{name: y, column: 3, dtype: float32}", "{type: mse, inputs: [pred, y], outputs: [loss]}")
	for _, c := range []struct{ train, want string }{
		{"train: {loss: loss, batch: 2, steps: 1, epochs: 3, optimizer: {type: sgd, lr: 0.1}}", "m.yaml:11:41: train has both steps (line 11) and epochs; keep one of them"},
		{"train: {loss: loss, batch: 2, epochs: 0, optimizer: {type: sgd, lr: 0.1}}", "m.yaml:11:39: train.epochs must be positive, got 0"},
		{"train: {loss: loss, batch: 2, epochs: 1.5, optimizer: {type: sgd, lr: 0.1}}", `m.yaml:11:39: train.epochs must be an integer, got "1.5"`},
	} {
		m := strings.Replace(base, "train: {loss: loss, batch: 2, steps: 1, optimizer: {type: sgd, lr: 0.1}}", c.train, 1)
		_, err := Load(writeModel(t, m, regressionCSV))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.train, err, c.want)
		}
	}
	m := strings.Replace(base, "steps: 1", "epochs: 4", 1)
	path := writeModel(t, m, regressionCSV)
	g, err := Load(path)
	if err != nil || g.Train.Epochs != 4 || g.Train.Steps != 0 {
		t.Fatalf("epochs: 4 read as %+v, %v", g.Train, err)
	}
	src, err := Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	back, err := LoadBytes(path, src)
	if err != nil || Diff(g, back) != "" {
		t.Errorf("epochs written and read back: %v %s\n%s", err, Diff(g, back), src)
	}
}
