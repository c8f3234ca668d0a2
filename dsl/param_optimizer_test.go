package dsl

import (
	"strings"
	"testing"
)

const perParamModel = `psgraph: 1
data:
  synthetic: {rows: 32, features: 4, classes: 3}
  features: {name: x}
  label: {name: y}
params:
  W: {shape: [4, 3], init: {type: normal, std: 0.1, seed: 1}, optimizer: {type: ftrl, lr: 0.2, initial_accumulator_value: 0.3, l1: 0.01}}
  b: {shape: [3]}
ops:
  - {type: matmul, inputs: [x, W], outputs: [z]}
  - {type: add, inputs: [z, b], outputs: [logits]}
  - {type: softmax_cross_entropy, inputs: [logits, y], outputs: [loss]}
train:
  loss: loss
  batch: 8
  optimizer: {type: adam, lr: 0.01}
`

// params.P.optimizer gives P an optimizer of its own: P's update ops and
// state are its template's (FTRL's accumulator starting at the
// initial_accumulator_value given there), the others' train.optimizer's.
func TestParamOptimizerOverridesTrainOptimizer(t *testing.T) {
	g, err := LoadBytes("m.yaml", []byte(perParamModel))
	if err != nil {
		t.Fatal(err)
	}
	if got := g.ParamOptimizers(); len(got) != 1 || got[0] != "W" {
		t.Fatalf("ParamOptimizers = %v, want [W]", got)
	}
	if o := g.OptimizerOf("W"); o.Type != "ftrl" || o.Hyper["lr"] != 0.2 || o.Hyper["l1"] != 0.01 || o.Hyper["lr_power"] != -0.5 {
		t.Fatalf("W's optimizer %s %v", o.Type, o.Hyper)
	}
	if o := g.OptimizerOf("b"); o.Type != "adam" {
		t.Fatalf("b's optimizer is %s, want train.optimizer adam", o.Type)
	}
	types := map[string]map[string]int{"W": {}, "b": {}}
	for _, op := range g.Ops {
		if op.Section == Optimize {
			types[op.Param][op.Type]++
		}
	}
	if types["W"]["pow"] != 2 || types["W"]["clip"] != 1 || types["W"]["sqrt"] != 0 {
		t.Errorf("W's update ops %v are not FTRL's", types["W"])
	}
	if types["b"]["sqrt"] != 2 || types["b"]["pow"] != 0 {
		t.Errorf("b's update ops %v are not adam's", types["b"])
	}
	acc := g.Vars["W@accumulator"]
	if acc == nil || acc.Init.Type != "constant" || acc.Init.Attrs.Float("value") != 0.3 {
		t.Fatalf("W@accumulator is %+v, want initialized to the constant 0.3", acc)
	}
	for _, s := range []string{"W@linear", "b@m", "b@v", "b@bias1"} {
		if g.Vars[s] == nil {
			t.Errorf("state %s is missing", s)
		}
	}
	if g.Vars["W@m"] != nil || g.Vars["b@accumulator"] != nil {
		t.Error("a parameter got the other optimizer's state")
	}
}

// A model whose every parameter has its own optimizer needs no
// train.optimizer; its file written before expansion reads back with the
// same optimizers.
func TestParamOptimizersWithoutTrainOptimizer(t *testing.T) {
	src := strings.Replace(perParamModel, "  b: {shape: [3]}", "  b: {shape: [3], optimizer: {type: rowwise_adagrad, lr: 0.1}}", 1)
	src = strings.Replace(src, "  optimizer: {type: adam, lr: 0.01}\n", "", 1)
	g, err := Parse("m.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("m.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, p := range []string{"W", "b"} {
		a, b := g.Vars[p].Optimizer, back.Vars[p].Optimizer
		if b == nil || a.Type != b.Type || len(a.Hyper) != len(b.Hyper) {
			t.Fatalf("%s: optimizer %+v read back as %+v\n%s", p, a, b, out)
		}
		for h, v := range a.Hyper {
			if b.Hyper[h] != v {
				t.Errorf("%s: %s = %v read back as %v", p, h, v, b.Hyper[h])
			}
		}
	}
	if err := back.Expand(); err != nil {
		t.Fatal(err)
	}
	if err := back.Trainable(); err != nil {
		t.Fatal(err)
	}
	if s := back.Vars["b@sum"]; s == nil || !s.Shape.Equal([]int{3}) {
		t.Fatalf("b@sum (row-wise adagrad of a vector) is %+v, want shape [3]", s)
	}
}

// A template's state may hold one value per row (shape: rows) and start
// from a hyper-parameter (init: {type: constant, value: $a0}).
func TestTemplateStatePerRowAndHyperInit(t *testing.T) {
	src := strings.Replace(perParamModel, "  optimizer: {type: adam, lr: 0.01}\n", `  optimizer:
    lr: 0.1
    a0: 0.25
    state: {acc: {shape: rows, init: {type: constant, value: 2 * $a0}}}
    update:
      - {type: mul, inputs: [$grad, $grad], outputs: [g2]}
      - {type: row_mean, inputs: [g2], outputs: [g2m]}
      - {type: add, inputs: [$acc, g2m], outputs: [acc_new]}
      - {type: div, inputs: [$grad, acc_new], outputs: [r]}
      - {type: scale, inputs: [r], outputs: [step], attrs: {factor: $lr}}
      - {type: sub, inputs: [$param, step], outputs: [p_new]}
    assign: {$acc: acc_new, $param: p_new}
`, 1)
	src = strings.Replace(src, ", optimizer: {type: ftrl, lr: 0.2, initial_accumulator_value: 0.3, l1: 0.01}", "", 1)
	g, err := LoadBytes("m.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for p, shape := range map[string][]int{"W": {4, 1}, "b": {3}} {
		v := g.Vars[p+"@acc"]
		if v == nil || !v.Shape.Equal(shape) || v.Init.Attrs.Float("value") != 0.5 {
			t.Errorf("%s@acc is %+v, want shape %v starting at 0.5", p, v, shape)
		}
	}
}
