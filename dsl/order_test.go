package dsl_test

import (
	"slices"
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
