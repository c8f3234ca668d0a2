package data

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
)

// A held-out, evaluation or prediction file with a header line must name
// the model's columns in the same order: columns are read by position, so
// swapped columns would be read as the wrong features. A prediction file
// may lack the last label column; without the model's own file, or
// without data.header, nothing is compared.
func TestOtherFileHeaderMustMatch(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("train.csv", "\n a , b ,y\n1,2,0\n3,4,1\n")
	swapped := write("swapped.csv", "b,a,y\n2,1,0\n4,3,1\n")
	write("same.csv", "a,b,y\n5,6,1\n")
	noLabel := write("nolabel.csv", "a,b\n5,6\n")
	model := func(header, eval string) *dsl.Data {
		src := "psgraph: 1\ndata:\n  csv: train.csv\n  header: " + header + "\n  features: {name: x, columns: [0, 2]}\n  label: {name: y, column: 2}\n"
		if eval != "" {
			src += "  eval: {csv: " + eval + "}\n"
		}
		g, err := dsl.Parse(filepath.Join(dir, "m.yaml"), []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return g.Data
	}
	_, err := LoadSplit(model("true", "swapped.csv"), nil)
	if err == nil || !strings.Contains(err.Error(), swapped+`:1: column 0 is named "b", but the model's data file `) || !strings.Contains(err.Error(), `names it "a"`) {
		t.Fatalf("held-out file with swapped columns: got %v", err)
	}
	if sp, err := LoadSplit(model("true", "same.csv"), nil); err != nil || sp.Eval.Rows != 1 {
		t.Fatalf("held-out file with the same columns: %v", err)
	}
	spec := model("true", "")
	if _, err := LoadFile(spec, swapped, nil); err == nil || !strings.Contains(err.Error(), "same order") {
		t.Errorf("evaluation file with swapped columns: got %v", err)
	}
	if _, err := Other(spec, noLabel); err != nil {
		t.Errorf("a prediction file without the last label column: %v", err)
	}
	if _, err := Other(model("false", ""), swapped); err != nil {
		t.Errorf("without data.header nothing is compared, got %v", err)
	}
	os.Remove(filepath.Join(dir, "train.csv"))
	if _, err := Other(spec, swapped); err != nil {
		t.Errorf("without the model's data file nothing is compared, got %v", err)
	}
}
