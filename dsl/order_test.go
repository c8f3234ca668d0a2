package dsl_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
)

// Ops may be written in any order: the step runs them in dependency
// order, ties by file order. A model already in dependency order keeps
// file order (the fast path of checkStructure); one that is not gets the
// order Kahn's algorithm gives.
func TestTopoOrder(t *testing.T) {
	const head = "psgraph: 1\nname: order\ndata:\n  synthetic: {rows: 8, features: 4, classes: 2}\n  features: {name: x}\n  label: {name: y}\nparams:\n  W: {shape: [4, 2]}\nops:\n"
	for _, c := range []struct {
		name, ops string
		want      []int
	}{
		{"in order", "  - {type: matmul, inputs: [x, W], outputs: [z]}\n  - {type: relu, inputs: [z], outputs: [r]}\n  - {type: tanh, inputs: [x], outputs: [u]}\n", []int{0, 1, 2}},
		{"reversed", "  - {type: relu, inputs: [z], outputs: [r]}\n  - {type: tanh, inputs: [x], outputs: [u]}\n  - {type: matmul, inputs: [x, W], outputs: [z]}\n", []int{1, 2, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := dsl.LoadBytes("order.yaml", []byte(head+c.ops))
			if err != nil {
				t.Fatal(err)
			}
			got, err := g.TopoOrder()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("order %v, want %v", got, c.want)
			}
		})
	}
}

// Load infers only the ops autodiff and the optimizer appended (the rest
// are typed already); the types it ends with equal a full inference of
// the expanded graph, for every shipped model.
func TestExpandTypesEqualFullInference(t *testing.T) {
	files, _ := filepath.Glob("../examples/*.yaml")
	more, _ := filepath.Glob("../testdata/*/*.yaml")
	plans, _ := filepath.Glob("../partition/testdata/split/*/model.yaml")
	for _, f := range append(append(files, more...), plans...) {
		g, err := dsl.Load(f)
		if err != nil && strings.Contains(err.Error(), "cannot be read") {
			t.Logf("%s: skipped, its data is generated (examples/README.md): %v", f, err)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		full, err := g.Infer(max(g.Batch(), 1))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(full) != len(g.Types) {
			t.Errorf("%s: %d types after Load, %d from a full inference", f, len(g.Types), len(full))
		}
		for name, want := range full {
			if got, ok := g.Types[name]; !ok || !got.Same(want) {
				t.Errorf("%s: %s is %v after Load, %v from a full inference", f, name, got, want)
			}
		}
	}
}
