package dsl_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
)

const dynamicModel = `psgraph: 1
name: dyn
params:
  emb:
    dynamic: {dim: 4, min_count: 2, probability: 0.5, ttl_steps: 100, capacity: 1000, policy: lru, sketch_bytes: 65536}
    init: {type: normal, std: 0.1, seed: 3}
  W: {shape: [8, 2]}
ops:
  - {type: lookup_table, inputs: [emb, keys], outputs: [e3]}
  - {type: reshape, inputs: [e3], outputs: [e], attrs: {shape: [-1, 8]}}
  - {type: matmul, inputs: [e, W], outputs: [logits]}
  - {type: softmax_cross_entropy, inputs: [logits, y], outputs: [loss]}
data:
  csv: x.csv
  label: {name: y, column: 0}
  ids: {name: keys, columns: [1, 3], key: hash64}
train: {loss: loss, batch: 4, steps: 1, optimizer: {type: adagrad, lr: 0.1}}
`

// A dynamic table parses into Var.Dynamic with shape [dynamic, dim],
// types and expands like a table (a row gradient, gathered state), and
// survives Marshal.
func TestDynamicTableParsesAndExpands(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.csv"), []byte("1,a,b\n0,c,d\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "dyn.yaml")
	g, err := dsl.Parse(file, []byte(dynamicModel))
	if err != nil {
		t.Fatal(err)
	}
	v := g.Vars["emb"]
	want := dsl.Dynamic{Dim: 4, MinCount: 2, Probability: 0.5, TTLSteps: 100, Capacity: 1000, Policy: "lru", SketchBytes: 65536}
	got := *v.Dynamic
	got.Pos = dsl.Pos{}
	if got != want {
		t.Fatalf("dynamic = %+v, want %+v", got, want)
	}
	if !v.Shape.Equal(ir.Shape{ir.DynamicRows, 4}) {
		t.Fatalf("shape %v", v.Shape)
	}
	if err := g.Expand(); err != nil {
		t.Fatal(err)
	}
	if gt := g.Types[dsl.GradName("emb")]; !gt.Sparse() || gt.MaxRows != 8 {
		t.Errorf("emb's gradient %v, want row-sparse with at most 8 rows", gt)
	}
	if s := g.Types["emb@sum"]; !s.Shape.Equal(ir.Shape{ir.DynamicRows, 4}) {
		t.Errorf("emb@sum %v, want [dynamic, 4]", s)
	}
	if got := g.DynamicParams(); len(got) != 1 || got[0] != "emb" {
		t.Errorf("DynamicParams = %v", got)
	}
	g2, err := dsl.Parse(file, []byte(dynamicModel))
	if err != nil {
		t.Fatal(err)
	}
	out, err := dsl.Marshal(g2)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "dynamic: {dim: 4, min_count: 2, probability: 0.5, sketch_bytes: 65536, ttl_steps: 100, capacity: 1000, policy: lru}") {
		t.Fatalf("Marshal lost the dynamic table:\n%s", out)
	}
	g3, err := dsl.Parse(file, out)
	if err != nil {
		t.Fatal(err)
	}
	if d := g3.Vars["emb"].Dynamic; d == nil || d.Dim != 4 || d.Capacity != 1000 {
		t.Fatalf("reparsed dynamic = %+v", d)
	}
}

// A pserver's graph serves a dynamic table only as its shard: split's
// shard: {of, index, count} lowers to dyn_serve and dyn_accumulate with
// the shard's place; the same graph without it is refused at the op.
func TestLowerDynamicShard(t *testing.T) {
	path := filepath.Join("..", "partition", "testdata", "split", "dynamic-2x2", "pserver-1.yaml")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := dsl.LoadBytes(path, src)
	if err != nil {
		t.Fatal(err)
	}
	l, tables, err := dsl.LowerDynamic(g)
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 || tables[0].Name != "emb.s1" || tables[0].Dynamic.TableName(tables[0].Name) != "emb" || tables[0].StateWidth != 4 {
		t.Fatalf("lowered tables %+v", tables)
	}
	served := map[string]bool{}
	for _, op := range l.Ops {
		if op.Type == "dyn_serve" || op.Type == "dyn_accumulate" {
			served[op.Type] = op.Attrs.Int("shard") == 1 && op.Attrs.Int("shards") == 2 && op.Attrs.String("var") == "emb.s1"
		}
		if op.Type == "serve_rows" || op.Type == "accumulate_rows" || op.Type == "gather_rows" {
			t.Errorf("op %s left after lowering", op.Type)
		}
	}
	if !served["dyn_serve"] || !served["dyn_accumulate"] {
		t.Errorf("lowered serve and accumulate: %v, want both on shard 1 of 2", served)
	}
	unsharded := strings.Replace(string(src), ", shard: {of: emb, index: 1, count: 2}", "", 1)
	if unsharded == string(src) {
		t.Fatal("the golden pserver file has no shard key")
	}
	g, err = dsl.LoadBytes(path, []byte(unsharded))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dsl.LowerDynamic(g); err == nil || !strings.Contains(err.Error(), "op serve_rows serves dynamic table emb.s1, which is not a pserver's shard") {
		t.Errorf("got %v, want the refusal", err)
	}
}
