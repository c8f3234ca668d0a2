package program

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/tensor"
)

const (
	dynRows  = 400 // rows of the file: 50 steps of 8, one pass
	dynBatch = 8
	dynVocab = 300 // keys 0..299, skewed: many seen once
	dynCols  = 3   // keys per row
)

// writeDynData writes a CSV of a label and dynCols integer keys per row,
// the keys drawn from a skewed distribution, and returns its rows' keys.
func writeDynData(t *testing.T, dir string) [][]int64 {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	keys := make([][]int64, dynRows)
	for i := range dynRows {
		fmt.Fprintf(&b, "%d", r.IntN(2))
		for range dynCols {
			u := r.Float64()
			k := int64(u * u * dynVocab)
			keys[i] = append(keys[i], k)
			fmt.Fprintf(&b, ",%d", k)
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, "d.csv"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return keys
}

// dynModel is a small model over the keys: a table (dynamic with the
// given dynamic: mapping, else fixed [dynVocab, 4] read by int32 ids),
// a linear layer, softmax cross-entropy.
func dynModel(t *testing.T, dir, dynamic, optimizer string) *dsl.Graph {
	return dynModelBag(t, dir, dynamic, optimizer, false)
}

// dynModelBag is dynModel; with bag, the table is also read by an
// embedding_bag of the same keys (two readers: their row gradients add).
func dynModelBag(t *testing.T, dir, dynamic, optimizer string, bag bool) *dsl.Graph {
	t.Helper()
	key := ""
	table := "emb: {shape: [300, 4], init: {type: normal, std: 0.1, seed: 7}}"
	if dynamic != "" {
		key, table = ", key: int64", "emb: {dynamic: "+dynamic+", init: {type: normal, std: 0.1, seed: 7}}"
	}
	ids := "ids: {name: keys, columns: [1, 4]" + key + "}"
	width, head := 12, "  - {type: reshape, inputs: [e3], outputs: [e], attrs: {shape: [-1, 12]}}"
	if bag {
		ids = "ids:\n    - {name: keys, columns: [1, 4]" + key + "}\n    - {name: bagkeys, columns: [2, 4]" + key + "}"
		width, head = 16, "  - {type: reshape, inputs: [e3], outputs: [e0], attrs: {shape: [-1, 12]}}\n  - {type: embedding_bag, inputs: [emb, bagkeys], outputs: [pb], attrs: {mode: mean}}\n  - {type: concat, inputs: [e0, pb], outputs: [e], attrs: {axis: 1}}"
	}
	src := fmt.Sprintf(`psgraph: 1
name: dyn
data:
  csv: d.csv
  label: {name: y, column: 0}
  %s
params:
  %s
  W: {shape: [%d, 2], init: {type: normal, std: 0.1, seed: 8}}
ops:
  - {type: lookup_table, inputs: [emb, keys], outputs: [e3]}
%s
  - {type: matmul, inputs: [e, W], outputs: [logits]}
  - {type: softmax_cross_entropy, inputs: [logits, y], outputs: [loss]}
train: {loss: loss, batch: %d, steps: %d, optimizer: %s}
`, ids, table, width, head, dynBatch, dynRows/dynBatch, optimizer)
	file := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := dsl.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// trainDyn runs steps steps of g in file order and returns the program.
func trainDyn(t *testing.T, g *dsl.Graph, steps int) *Program {
	t.Helper()
	p, err := Compile(g, CompileOptions{Batch: dynBatch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := Init(p, InitOptions{From: ""}); err != nil {
		t.Fatal(err)
	}
	loaded, err := data.LoadSplit(g.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := loaded.Train
	st, f := data.NewOrderedStream(set), NewFeeder(g, p.Scope)
	rt := &Runtime{Ctx: context.Background()}
	for k := range steps {
		if err := f.Fill(st, int64(k*dynBatch)); err != nil {
			t.Fatal(err)
		}
		rt.StepNum = int64(k)
		if err := p.Run(rt); err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
	}
	return p
}

// The live rows of a dynamic table are exactly the distinct keys seen at
// least min_count times, counted here with a map; with ttl_steps, exactly
// those also seen within the last ttl steps.
func TestDynamicTableAdmitsAndExpiresExactly(t *testing.T) {
	steps := dynRows / dynBatch
	for _, c := range []struct {
		minCount, ttl int
	}{{1, 0}, {2, 0}, {3, 0}, {1, 5}, {2, 10}} {
		t.Run(fmt.Sprintf("min_count=%d,ttl=%d", c.minCount, c.ttl), func(t *testing.T) {
			dir := t.TempDir()
			keys := writeDynData(t, dir)
			g := dynModel(t, dir, fmt.Sprintf("{dim: 4, min_count: %d, ttl_steps: %d}", c.minCount, c.ttl), "{type: adagrad, lr: 0.1}")
			p := trainDyn(t, g, steps)
			count, admittedAt, last := map[int64]int{}, map[int64]int{}, map[int64]int{}
			for k := range steps {
				for _, row := range keys[k*dynBatch : (k+1)*dynBatch] {
					for _, key := range row {
						count[key]++
						if _, ok := admittedAt[key]; !ok && count[key] >= max(c.minCount, 1) {
							admittedAt[key] = k
						}
						if _, ok := admittedAt[key]; ok {
							last[key] = k
						}
					}
				}
			}
			live := 0
			for key := range admittedAt {
				if c.ttl == 0 || last[key]+c.ttl > steps-1 {
					live++
				}
			}
			st := p.Tables["emb"].Stats()
			if st.Live != int64(live) {
				t.Errorf("live rows %d, want %d (of %d distinct keys)", st.Live, live, len(count))
			}
			if st.Admitted < uint64(len(admittedAt)) || c.ttl == 0 && st.Admitted != uint64(len(admittedAt)) {
				t.Errorf("admitted %d, want %d", st.Admitted, len(admittedAt))
			}
			if c.minCount > 1 && live >= len(count) {
				t.Errorf("min_count %d admitted every one of %d keys", c.minCount, len(count))
			}
			if c.ttl > 0 && st.EvictedTTL == 0 {
				t.Errorf("ttl_steps %d evicted nothing", c.ttl)
			}
		})
	}
}

// A dynamic table with min_count 1 and no eviction trains to the same
// parameters as a fixed table whose row k is key k: every row of a key
// seen equals the fixed table's row, bit for bit, and so does W.
func TestDynamicTableTrainsAsFixedTable(t *testing.T) {
	for _, c := range []struct {
		opt string
		bag bool
	}{{"{type: sgd, lr: 0.1}", false}, {"{type: adagrad, lr: 0.1}", false}, {"{type: rowwise_adagrad, lr: 0.1}", false},
		{"{type: adam, lr: 0.01}", false}, {"{type: ftrl, lr: 0.1}", false}, {"{type: adagrad, lr: 0.1}", true}} {
		opt := c.opt
		t.Run(fmt.Sprintf("%s,bag=%v", opt, c.bag), func(t *testing.T) {
			dir := t.TempDir()
			keys := writeDynData(t, dir)
			steps := dynRows / dynBatch
			fixed := trainDyn(t, dynModelBag(t, dir, "", opt, c.bag), steps)
			dyn := trainDyn(t, dynModelBag(t, dir, "{dim: 4}", opt, c.bag), steps)
			seen := map[int64]bool{}
			for _, row := range keys {
				for _, k := range row {
					seen[k] = true
				}
			}
			table := dyn.Tables["emb"]
			if got := table.Stats().Live; got != int64(len(seen)) {
				t.Fatalf("live rows %d, want the %d distinct keys", got, len(seen))
			}
			emb := fixed.Scope["emb"].F
			got := make([]float32, 4)
			diff := 0
			for k := range int64(dynVocab) {
				if !seen[k] {
					continue
				}
				if err := table.Read([]int64{k}, got); err != nil {
					t.Fatal(err)
				}
				for j, x := range got {
					if x != emb[int(k)*4+j] {
						if diff < 3 {
							t.Errorf("key %d column %d: dynamic %v, fixed %v", k, j, x, emb[int(k)*4+j])
						}
						diff++
					}
				}
			}
			for i, x := range dyn.Scope["W"].F {
				if x != fixed.Scope["W"].F[i] {
					t.Fatalf("W[%d]: dynamic %v, fixed %v", i, x, fixed.Scope["W"].F[i])
				}
			}
			if diff > 0 {
				t.Errorf("%d values differ", diff)
			}
		})
	}
}

// Once its keys have rows, a step of a dynamic table allocates nothing:
// the pull's key index, the positions, gathers and scatter reuse their
// buffers, and the table its pages.
func TestDynamicStepDoesNotAllocate(t *testing.T) {
	dir := t.TempDir()
	writeDynData(t, dir)
	g := dynModel(t, dir, "{dim: 4, ttl_steps: 1000}", "{type: adagrad, lr: 0.1}")
	steps := dynRows / dynBatch
	p := trainDyn(t, g, steps) // every key admitted
	loaded, err := data.LoadSplit(g.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := loaded.Train
	st, f := data.NewOrderedStream(set), NewFeeder(g, p.Scope)
	rt := &Runtime{Ctx: context.Background()}
	k := steps
	allocs := testing.AllocsPerRun(2*steps, func() {
		if err := f.Fill(st, int64((k%steps)*dynBatch)); err != nil {
			t.Fatal(err)
		}
		rt.StepNum = int64(k)
		if err := p.Run(rt); err != nil {
			t.Fatal(err)
		}
		k++
	})
	if allocs != 0 {
		t.Errorf("%.2f allocations per step, want 0", allocs)
	}
}

// A model file's dynamic table that is not keys and rows of the table's
// width (a wrong width, a key twice, the padding key, keys missing) is
// refused with an error naming the file and the tensor, and nothing is
// loaded.
func TestLoadTableRefusesMalformedFiles(t *testing.T) {
	dir := t.TempDir()
	writeDynData(t, dir)
	g := dynModel(t, dir, "{dim: 4}", "{type: sgd, lr: 0.1}")
	_, tables, err := dsl.LowerDynamic(g)
	if err != nil {
		t.Fatal(err)
	}
	keys := func(k ...int64) *tensor.Tensor {
		x := tensor.New(tensor.I64, tensor.Shape{len(k)})
		copy(x.L, k)
		return x
	}
	rows := func(n, w int) *tensor.Tensor { return tensor.New(tensor.F32, tensor.Shape{n, w}) }
	for name, c := range map[string]struct {
		keys, rows *tensor.Tensor
		want       string
	}{
		"width":     {keys(1, 2), rows(2, 3), "m.safetensors: emb is float32[2, 3], want float32 [2, 4]"},
		"count":     {keys(1, 2), rows(3, 4), "want float32 [2, 4]"},
		"duplicate": {keys(1, 7, 1), rows(3, 4), "key 1 appears twice in emb.keys"},
		"padding":   {keys(1, ir.PadKey), rows(2, 4), "is the padding key"},
		"no keys":   {nil, rows(2, 4), "needs tensors emb.keys (int64 keys) and emb"},
		"key dtype": {rows(2, 1), rows(2, 4), "emb.keys is float32[2, 1], want int64 [n] keys"},
	} {
		t.Run(name, func(t *testing.T) {
			tab, err := NewTable(tables[0])
			if err != nil {
				t.Fatal(err)
			}
			err = LoadTable(tab, tables[0], c.keys, c.rows, "m.safetensors")
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "m.safetensors") {
				t.Fatalf("error %v, want one naming the file and %q", err, c.want)
			}
			if live := tab.Stats().Live; live != 0 {
				t.Errorf("%d rows loaded from a refused file", live)
			}
		})
	}
}
