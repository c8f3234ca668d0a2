package dsl

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl/ops"
)

// TestExpandSpeculationEqualsSequential loads every model in the
// repository, the error cases and generated models with each optimizer
// feature, with the optimizer built while autodiff runs and without: the
// graphs, their types and their errors must be the same, and the
// speculation must be kept where every parameter gets a dense gradient.
func TestExpandSpeculationEqualsSequential(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	models := map[string][]byte{}
	for _, pat := range []string{"../examples/*.yaml", "../testdata/*/*.yaml", "testdata/errors/*.yaml"} {
		files, _ := filepath.Glob(pat)
		for _, f := range files {
			f = withGeneratedData(t, f)
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			models[f] = b
		}
	}
	deep := deepModel(40)
	for name, opt := range map[string]string{
		"sgd":             "{type: sgd, lr: 0.1}",
		"momentum-wd":     "{type: momentum, lr: 0.1, weight_decay: 0.01}",
		"adam-schedule":   "{type: adam, lr: {schedule: cosine, steps: 10, warmup: 2}}",
		"adamw":           "{type: adamw, lr: 0.01}",
		"adagrad-clip":    "{type: adagrad, lr: 0.1}\n  clip: {value: 0.5}",
		"clip-norm":       "{type: sgd, lr: 0.1}\n  clip: {norm: 1.0}",
		"template-error":  "{update: [{type: scale, inputs: [$nope], outputs: [x]}], assign: [{$param: x}]}",
		"template-arity":  "{update: [{type: add, inputs: [$param], outputs: [x]}], assign: [{$param: x}]}",
		"template-arity2": "{update: [{type: sub, inputs: [$param, $grad, $grad], outputs: [x]}], assign: [{$param: x}]}",
	} {
		models["deep-"+name] = []byte(strings.Replace(deep, "optimizer: {type: sgd, lr: 0.1}", "optimizer: "+opt, 1))
	}
	// A parameter without a gradient, and a user variable with a state's
	// name: the speculation must be dropped.
	models["unused-param"] = []byte(strings.Replace(deep, "params:\n", "params:\n  unused: {shape: [4]}\n", 1))
	models["state-clash"] = []byte(strings.Replace(strings.Replace(deep, "optimizer: {type: sgd, lr: 0.1}", "optimizer: {type: momentum, lr: 0.1}", 1),
		"params:\n", "state:\n  W3@velocity: {shape: [4, 4]}\nparams:\n", 1))

	// The forward ops fit only at the batch (a mean without keepdims
	// subtracted from its input, with the batch equal to the width): the
	// symbolic batch's error, which the speculating expansion finds beside
	// its final checks, must be the sequential one, also before the
	// structure error of a declared gradient name, and the graph must
	// load with the trap taken out.
	trap := strings.NewReplacer("batch: 16", "batch: 4",
		"ops:\n", "ops:\n  - {type: mean, inputs: [x], outputs: [mu], attrs: {axis: 1}}\n  - {type: sub, inputs: [x, mu], outputs: [xc]}\n").Replace(deep)
	models["batch-trap"] = []byte(trap)
	models["batch-trap-grad-clash"] = []byte(strings.Replace(trap, "params:\n", "state:\n  W3@GRAD: {shape: [4, 4]}\nparams:\n", 1))
	models["grad-clash"] = []byte(strings.Replace(deep, "params:\n", "state:\n  W3@GRAD: {shape: [4, 4]}\nparams:\n", 1))
	models["batch-fits"] = []byte(strings.Replace(trap, "attrs: {axis: 1}}", "attrs: {axis: 1, keepdims: true}}", 1))

	kept, dropped := 0, 0
	speculationKept = func(k bool) {
		if k {
			kept++
		} else {
			dropped++
		}
	}
	defer func() { speculationKept, speculate = nil, true }()
	for name, src := range models {
		speculate = true
		k0, d0 := kept, dropped
		gs, errs := LoadBytes(name, src)
		k1, d1 := kept, dropped
		speculate = false
		gq, errq := LoadBytes(name, src)
		if fmt.Sprint(errs) != fmt.Sprint(errq) {
			t.Fatalf("%s: errors differ:\n  speculating: %v\n  sequential:  %v", name, errs, errq)
		}
		switch want := map[string]string{"batch-trap": "op sub", "batch-trap-grad-clash": "op sub", "grad-clash": "W3@GRAD"}[name]; {
		case want != "" && (errs == nil || !strings.Contains(errs.Error(), want)):
			t.Fatalf("%s: got %v, want an error about %s", name, errs, want)
		case name == "batch-fits" && errs != nil:
			t.Fatalf("%s: %v", name, errs)
		}
		if errs != nil {
			continue
		}
		ms, err1 := Marshal(gs)
		mq, err2 := Marshal(gq)
		if err1 != nil || err2 != nil || string(ms) != string(mq) {
			t.Fatalf("%s: expanded graphs differ (%v, %v)", name, err1, err2)
		}
		if !reflect.DeepEqual(gs.Types, gq.Types) {
			t.Fatalf("%s: types differ", name)
		}
		switch {
		case name == "unused-param" || name == "state-clash":
			if d1 == d0 {
				t.Fatalf("%s: the speculation was not dropped", name)
			}
		case strings.HasPrefix(name, "deep-") && name != "deep-clip-norm" && k1 == k0:
			t.Fatalf("%s: the speculation was not kept", name)
		}
	}
	t.Logf("kept %d, dropped %d of %d models", kept, dropped, len(models))
	if kept < 20 {
		t.Fatalf("the speculation was kept for only %d models", kept)
	}
}

// A model may name its own values bw.<type>.<n>, as autodiff names its
// temporaries: its backward pass is the one of the same model under
// other names (autodiff never renames them, and they never stop a
// temporary's renaming), here with names whose numbers are those of
// autodiff's temporaries, read by gradient ops and summed from two uses.
func TestAutodiffModelNamesLikeTemporaries(t *testing.T) {
	src := `psgraph: 1
name: bw
data:
  synthetic: {rows: 16, features: 4, classes: 4}
  features: {name: x}
  label: {name: y}
params:
  W0: {shape: [4, 4], init: {type: he_normal}}
  W1: {shape: [4, 4], init: {type: he_normal}}
ops:
  - {type: matmul, inputs: [x, W0], outputs: [bw.relu.1]}
  - {type: relu, inputs: [bw.relu.1], outputs: [bw.relu.2]}
  - {type: matmul, inputs: [bw.relu.2, W1], outputs: [bw.relu.3]}
  - {type: add, inputs: [bw.relu.3, bw.relu.1], outputs: [bw.relu.4]}
  - {type: softmax_cross_entropy, inputs: [bw.relu.4, y], outputs: [loss]}
train: {loss: loss, batch: 4, optimizer: {type: momentum, lr: 0.1}}
`
	defer func() { speculate = true }()
	for _, spec := range []bool{true, false} {
		speculate = spec
		got, err := LoadBytes("bw.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		want, err := LoadBytes("u.yaml", []byte(strings.ReplaceAll(src, "bw.relu.", "u.relu.")))
		if err != nil {
			t.Fatal(err)
		}
		g, err1 := Marshal(got)
		w, err2 := Marshal(want)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if string(g) != strings.ReplaceAll(string(w), "u.relu.", "bw.relu.") {
			t.Fatalf("speculate %v: the backward pass differs with the model's names like autodiff's:\n%s\nwant\n%s", spec, g, w)
		}
		if !strings.Contains(string(g), "{type: add, inputs: [bw.relu.4@GRAD, bw.relu_grad.") {
			t.Fatalf("no sum of two uses' gradients:\n%s", g)
		}
	}
}

// The speculation types the optimizer's ops one parameter at a time when
// each parameter's ops come together (every built-in optimizer, with a
// schedule or weight decay too), and in one map of every name otherwise
// (clip by value clips every gradient before the first update): both
// give the types the one map gives, which is how the speculation typed
// them before the per-parameter maps.
func TestSpeculationTypesPerParameterEqualOneMap(t *testing.T) {
	deep := deepModel(12)
	for opt, perParam := range map[string]bool{
		"{type: sgd, lr: 0.1}":                            true,
		"{type: momentum, lr: 0.1, weight_decay: 0.01}":   true,
		"{type: adam, lr: {schedule: cosine, steps: 10}}": true,
		"{type: adagrad, lr: 0.1}\n  clip: {value: 0.5}":  false,
	} {
		g, err := Parse("deep.yaml", []byte(strings.Replace(deep, "optimizer: {type: sgd, lr: 0.1}", "optimizer: "+opt, 1)))
		if err != nil {
			t.Fatal(err)
		}
		params, batch := g.Params(), g.Batch()
		x, err := g.optimizerOps(params, nil)
		if err != nil {
			t.Fatal(err)
		}
		one, ok := g.inferInOneMap(params, x, batch)
		if !ok || len(one) == 0 {
			t.Fatalf("%s: the one map typed nothing (%v)", opt, ok)
		}
		merged := func(l []namedType) map[string]ops.Type {
			m := map[string]ops.Type{}
			for _, n := range l {
				m[n.name] = n.t
			}
			return m
		}
		by, ok := g.inferByParam(x, batch)
		if ok != perParam {
			t.Fatalf("%s: typed per parameter %v, want %v", opt, ok, perParam)
		}
		if ok && !reflect.DeepEqual(merged(by), merged(one)) {
			t.Fatalf("%s: per parameter %v\none map %v", opt, merged(by), merged(one))
		}
	}
}
