package data

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
)

// A held-out, evaluation or prediction file with a header line is matched
// by the names of its columns: in another order, with columns the model
// does not read left out or added, it gives the rows the model's own file
// gives (hashed ids included: a column keeps its hash space). A column
// the model reads that the file lacks is an error naming it; a prediction
// file may lack the label wherever it stood.
func TestOtherFileMatchedByHeaderNames(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("train.csv", "y, a ,b,unused,c\n0,1,2,x,red\n1,3,4,y,blue\n")
	write("swapped.csv", "c,b,extra,a,y\nred,2,9,1,0\nblue,4,9,3,1\n")
	noLabel := write("nolabel.csv", "b,c,a\n2,red,1\n4,blue,3\n")
	lacking := write("lacking.csv", "a,y,c\n1,0,red\n")
	model := func(eval string) *dsl.Data {
		src := "psgraph: 1\ndata:\n  csv: train.csv\n  header: true\n  features: {name: x, columns: [a, b]}\n  label: {name: y, column: y}\n  ids: {name: c, column: c, hash_buckets: 1000}\n"
		if eval != "" {
			src += "  eval: {csv: " + eval + "}\n"
		}
		g, err := dsl.Parse(filepath.Join(dir, "m.yaml"), []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return g.Data
	}
	sp, err := LoadSplit(model("swapped.csv"), nil)
	if err != nil {
		t.Fatal(err)
	}
	train, held := sp.Train, sp.Eval
	if !slices.Equal(held.Features, train.Features) || !slices.Equal(held.Labels, train.Labels) || !slices.Equal(held.IDs, train.IDs) {
		t.Errorf("swapped file read %v %v %v, the model's file %v %v %v", held.Features, held.Labels, held.IDs, train.Features, train.Labels, train.IDs)
	}
	if want := []int32{HashID(4, []byte("red"), 1000), HashID(4, []byte("blue"), 1000)}; !slices.Equal(held.IDs, want) {
		t.Errorf("ids of the swapped file %v, want the hashes of the model's column 4: %v", held.IDs, want)
	}
	spec := model("")
	pred, err := ForPrediction(spec, noLabel)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := OpenStreamScaled(pred, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := newBatch(pred, 2)
	if err := fs.Epoch(b.all, func(int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	fs.Close()
	if !slices.Equal(b.all[0].F, train.Features) || !slices.Equal(b.all[1].I, train.IDs) {
		t.Errorf("prediction file without the label read %v %v, want %v %v", b.all[0].F, b.all[1].I, train.Features, train.IDs)
	}
	if _, err := LoadFile(spec, lacking, nil); err == nil || !strings.Contains(err.Error(), lacking+`:1: the file has no column "b", which data.features "x" reads`) {
		t.Errorf("a file without a column the model reads: got %v", err)
	}
	if _, err := Other(spec, noLabel); err == nil || !strings.Contains(err.Error(), `no column "y", which data.label "y" reads`) {
		t.Errorf("a held-out file without the label: got %v", err)
	}
}
