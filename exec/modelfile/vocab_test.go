package modelfile

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/tensor"
)

// The vocabularies built from the training rows are saved with the model
// and read back with it, so that a served row (LineParser) and a
// prediction file map values to the ids training did, even when the
// training file has changed since.
func TestVocabsTravelWithTheModel(t *testing.T) {
	dir := t.TempDir()
	train := filepath.Join(dir, "train.csv")
	if err := os.WriteFile(train, []byte("c,y\nred,1\nblue,0\nred,1\ngreen,0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := `psgraph: 1
data:
  csv: train.csv
  header: true
  ids: {name: c, column: c, vocab: {min_count: 1, oov_buckets: 2}}
  label: {name: y, column: y, dtype: float32}
params:
  E: {shape: [5, 1]}
ops:
  - {type: embedding_bag, inputs: [E, c], outputs: [logit]}
  - {type: sigmoid_cross_entropy, inputs: [logit, y], outputs: [loss]}
train: {loss: loss, batch: 2, steps: 1, optimizer: {type: sgd, lr: 0.1}}
`
	path := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := dsl.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := data.LoadSplit(g.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (data.Vocabs{"data.ids": {{"red", "blue", "green"}}}); !reflect.DeepEqual(sp.Norm.Vocabs, want) {
		t.Fatalf("built %v, want %v", sp.Norm.Vocabs, want)
	}
	file := filepath.Join(dir, "model.safetensors")
	E := tensor.New(tensor.F32, tensor.Shape{5, 1})
	if err := SaveModel(file, "m", -1, []string{"E"}, map[string]*tensor.Tensor{"E": E}, sp.Norm); err != nil {
		t.Fatal(err)
	}
	// The training file changes: green is now the most frequent value.
	if err := os.WriteFile(train, []byte("c,y\ngreen,1\ngreen,0\ngreen,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, norm, err := LoadModel(g, file, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(norm.Vocabs, sp.Norm.Vocabs) {
		t.Fatalf("read back %v, saved %v", norm.Vocabs, sp.Norm.Vocabs)
	}
	lp, err := data.NewLineParser(g.Data, norm)
	if err != nil {
		t.Fatal(err)
	}
	ids := tensor.New(tensor.I32, tensor.Shape{3, 1})
	for i, line := range []string{"red", "green", "blue,1"} {
		if err := lp.Parse([]byte(line), i+1, []*tensor.Tensor{ids}, i); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(ids.I, []int32{0, 2, 1}) {
		t.Errorf("served ids %v, want the training ids [0 2 1]", ids.I)
	}
	pred, err := data.ForPrediction(g.Data, train)
	if err != nil {
		t.Fatal(err)
	}
	set, err := data.LoadFile(pred, train, norm)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(set.IDs, []int32{2, 2, 2}) {
		t.Errorf("prediction ids %v, want green's training id 2 three times", set.IDs)
	}
}
