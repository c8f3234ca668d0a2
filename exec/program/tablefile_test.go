package program

import (
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/tensor"
)

// A dynamic table's tensors in a model file are written from the table as
// the file is (TableEntries, what --save of a local run writes): a table
// of 400,000 rows of 16 with adagrad's state (25.6 MB of values, 57.6 MB
// of records) saves its keys in ascending order and each key's row as set
// in the test, while the save allocates less than the keys' 3.2 MB plus
// 8 MiB; a copy of the rows, as the save made before, would be 25.6 MB
// (the local run of 4.5M rows peaked at three times its table's bytes).
func TestTableEntriesStreamTheRows(t *testing.T) {
	const n, dim = 400000, 16
	tab, err := dyntable.New(dyntable.Config{Dim: dim, StateWidth: dim, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	keys := make([]int64, 0, n)
	seen := map[int64]int{}
	for len(keys) < n {
		k := int64(r.Uint64())
		if _, dup := seen[k]; dup || k == ir.PadKey {
			continue
		}
		seen[k] = len(keys)
		keys = append(keys, k)
	}
	counts := make([]uint32, n)
	for i := range counts {
		counts[i] = 1
	}
	slots := make([]int32, n)
	if err := tab.Lookup(keys, counts, slots); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, n*dim) // row i: key i's values
	for i := range want {
		want[i] = r.Float32() - 0.5
	}
	if err := tab.Scatter(slots, 0, dim, want); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(t.TempDir(), "model.safetensors")
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	entries, err := TableEntries("emb", tab)
	if err != nil {
		t.Fatal(err)
	}
	if err := modelfile.SaveStreamed(path, entries, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if alloc, limit := after.TotalAlloc-before.TotalAlloc, uint64(8*n+8<<20); alloc > limit {
		t.Errorf("saving the table allocated %d bytes, more than its keys' %d plus 8 MiB: the rows were copied", alloc, 8*n)
	} else {
		t.Logf("saving %d rows allocated %d bytes", n, alloc)
	}

	ts, _, err := modelfile.LoadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	gotKeys, gotRows := ts["emb.keys"], ts["emb"]
	if gotKeys == nil || gotRows == nil || len(gotKeys.L) != n || len(gotRows.F) != n*dim {
		t.Fatalf("the file holds %v and %v, want %d keys and %d x %d rows", gotKeys, gotRows, n, n, dim)
	}
	sorted := slices.Sorted(slices.Values(keys))
	if !slices.Equal(gotKeys.L, sorted) {
		t.Fatal("the file's keys are not the table's in ascending order")
	}
	for i, k := range gotKeys.L {
		j := seen[k]
		if !slices.Equal(gotRows.F[i*dim:(i+1)*dim], want[j*dim:(j+1)*dim]) {
			t.Fatalf("row %d of the file (key %d) is %v, want %v", i, k, gotRows.F[i*dim:(i+1)*dim], want[j*dim:(j+1)*dim])
		}
	}
}

// tableTensors is a table's live rows as a model file holds them, whole
// in memory (the tests compare two tables by them): its keys (int64 [n],
// ascending) and their values (float32 [n, dim]).
func tableTensors(t *dyntable.Table) (keys, rows *tensor.Tensor, err error) {
	ks, err := TableKeys(t)
	if err != nil {
		return nil, nil, err
	}
	dim := t.Config().Dim
	keys = tensor.New(tensor.I64, tensor.Shape{len(ks)})
	copy(keys.L, ks)
	rows = tensor.New(tensor.F32, tensor.Shape{len(ks), dim})
	if err := t.Read(ks, rows.F); err != nil {
		return nil, nil, err
	}
	return keys, rows, nil
}
