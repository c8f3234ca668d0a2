package dsl_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
)

// The trap of batch_trap_mean.yaml (dsl/testdata/errors) is refused at
// the sub, pointing at the mean; the model with keepdims: true on that
// mean loads, and so do models whose widths equal the batch without
// lining up by accident: a [batch, batch] score matrix of in-batch
// negatives and its arange_like labels, a batch of 64 over 64 features.
func TestBatchIsSymbolicInShapeChecks(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "errors", "batch_trap_mean.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = dsl.LoadBytes("trap.yaml", src)
	if err == nil || !strings.Contains(err.Error(), "trap.yaml:12:5: op sub") || !strings.Contains(err.Error(), "write keepdims: true there") {
		t.Fatalf("the trap loaded or was refused otherwise: %v", err)
	}
	fixed := strings.Replace(string(src), "attrs: {axis: 1}", "attrs: {axis: 1, keepdims: true}", 1)
	g, err := dsl.LoadBytes("fixed.yaml", []byte(fixed))
	if err != nil {
		t.Fatalf("with keepdims: %v", err)
	}
	if mu := g.Types["mu"]; mu.Shape.String() != "[8, 1]" {
		t.Errorf("mu is %v at batch 8, want [8, 1]", mu)
	}
	for _, batch := range []int{1, 3, 8, 100} {
		if _, err := g.Infer(batch); err != nil {
			t.Errorf("the fixed model at batch %d: %v", batch, err)
		}
	}
	ok := map[string]string{
		"in-batch negatives at batch 4 of width 4": `psgraph: 1
data:
  synthetic: {rows: 32, features: 4, classes: 3}
  features: {name: x}
  label: {name: y}
params:
  U: {shape: [4, 4], init: {type: normal, seed: 1}}
  V: {shape: [4, 4], init: {type: normal, seed: 2}}
ops:
  - {type: matmul, inputs: [x, U], outputs: [u]}
  - {type: matmul, inputs: [x, V], outputs: [v]}
  - {type: matmul, inputs: [u, v], outputs: [scores], attrs: {transpose_b: true}}
  - {type: arange_like, inputs: [scores], outputs: [pos]}
  - {type: softmax_cross_entropy, inputs: [scores, pos], outputs: [loss]}
  - {type: reduce_max, inputs: [scores], outputs: [top], attrs: {axis: 1, keepdims: true}}
  - {type: sub, inputs: [scores, top], outputs: [shifted]}
train: {loss: loss, batch: 4, optimizer: {type: sgd, lr: 0.1}}
`,
		"layer_norm by hand with keepdims, batch 8 of width 8": strings.Replace(string(src), "{axis: 1}", "{axis: -1, keepdims: true}", 1),
	}
	for name, m := range ok {
		if _, err := dsl.LoadBytes("ok.yaml", []byte(m)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := dsl.Load("../examples/digits-mlp.yaml"); err != nil {
		t.Errorf("digits (batch 64 over 64 features): %v", err)
	}
}
