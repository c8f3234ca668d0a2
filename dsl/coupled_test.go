package dsl_test

import (
	"testing"

	"github.com/psgraph/psgraph/dsl"
)

// Which losses and metrics depend on the rows batched together: a mean of
// per-row terms does not; in-batch negatives' scores [batch, batch], a
// count over the batch's rows [1, batch], and a batch mean put back into
// each row do, and so does everything computed from them.
func TestCoupledFindsWhereRowsMeet(t *testing.T) {
	const head = `psgraph: 1
data:
  synthetic: {rows: 32, features: 4, classes: 3}
  features: {name: x}
  label: {name: y}
params:
  U: {shape: [4, 4], init: {type: normal, seed: 1}}
  V: {shape: [4, 3], init: {type: normal, seed: 2}}
train: {loss: loss, metrics: [acc], batch: 4, optimizer: {type: sgd, lr: 0.1}}
ops:
`
	cases := []struct {
		name, ops string
		want      map[string]string // loss/metric -> where its rows meet ("": nowhere)
	}{
		{"per-row", `  - {type: matmul, inputs: [x, U], outputs: [h]}
  - {type: relu, inputs: [h], outputs: [r]}
  - {type: matmul, inputs: [r, V], outputs: [logits]}
  - {type: softmax_cross_entropy, inputs: [logits, y], outputs: [loss]}
  - {type: accuracy, inputs: [logits, y], outputs: [acc]}
`, map[string]string{"loss": "", "acc": ""}},
		{"in-batch negatives", `  - {type: matmul, inputs: [x, U], outputs: [u]}
  - {type: matmul, inputs: [x, U], outputs: [v]}
  - {type: matmul, inputs: [u, v], outputs: [scores], attrs: {transpose_b: true}}
  - {type: arange_like, inputs: [scores], outputs: [pos]}
  - {type: softmax_cross_entropy, inputs: [scores, pos], outputs: [loss]}
  - {type: matmul, inputs: [x, V], outputs: [logits]}
  - {type: accuracy, inputs: [logits, y], outputs: [acc]}
`, map[string]string{"loss": "scores is [batch, batch]", "acc": ""}},
		{"a batch mean in each row", `  - {type: matmul, inputs: [x, U], outputs: [h]}
  - {type: mean, inputs: [h], outputs: [mu], attrs: {axis: 0, keepdims: true}}
  - {type: sub, inputs: [h, mu], outputs: [c]}
  - {type: matmul, inputs: [c, V], outputs: [logits]}
  - {type: softmax_cross_entropy, inputs: [logits, y], outputs: [loss]}
  - {type: accuracy, inputs: [logits, y], outputs: [acc]}
`, map[string]string{"loss": "c puts mu, computed over all the batch's rows, into each row", "acc": "c puts mu, computed over all the batch's rows, into each row"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := dsl.LoadBytes("m.yaml", []byte(head+c.ops))
			if err != nil {
				t.Fatal(err)
			}
			for v, want := range c.want {
				got, err := g.Coupled(v)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case want == "" && got != nil:
					t.Errorf("%s: coupled (%s at %s), want not", v, got.Why, got.Pos)
				case want != "" && (got == nil || got.Why != want):
					t.Errorf("%s: %+v, want %q", v, got, want)
				}
			}
		})
	}
	// The zoo's two-tower model: its loss and recall@10 rank each row
	// among the items of its batch; the other models' values are per row.
	g, err := dsl.Load("../testdata/zoo-sparse/two-tower.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{g.Train.Loss, "recall10"} {
		if c, err := g.Coupled(v); err != nil || c == nil {
			t.Errorf("two-tower %s: %+v %v, want coupled", v, c, err)
		} else {
			t.Logf("two-tower %s: %s (%s)", v, c.Why, c.Pos)
		}
	}
	for _, m := range []string{"../examples/digits-mlp.yaml", "../testdata/zoo-sparse/wide-deep.yaml", "../testdata/zoo-sparse/multi-hot.yaml"} {
		g, err := dsl.Load(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range append([]string{g.Train.Loss}, g.Train.Metrics...) {
			if c, err := g.Coupled(v); err != nil || c != nil {
				t.Errorf("%s %s: %+v %v, want per row", m, v, c, err)
			}
		}
	}
}
