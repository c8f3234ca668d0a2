package kernels_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
)

// torchCase is one case of a reference file written by a
// testdata/*/gen_reference.py script: an op, its attributes and inputs,
// and what torch computed from them.
type torchCase struct {
	Name    string   `json:"name"`
	Op      string   `json:"op"`
	Attrs   string   `json:"attrs"`
	Inputs  []string `json:"inputs"` // per input: param (its gradient is checked), state or ids (int32 ids or int64 keys)
	Outputs int      `json:"outputs"`
	Mode    string   `json:"mode"`  // train, or eval: the program evaluates (kernels.Args.Inference)
	Batch   int      `json:"batch"` // train.batch; 0: 2
}

// TestOpsMatchTorch runs every case of the reference files through the
// op's kernel, and its gradient rule where an input is a param: each
// output, and each param's gradient of loss = sum(out0 * R), must be
// torch's (ids exactly, floats within 1e-5 + 1e-4 relative), and a step
// must allocate nothing.
func TestOpsMatchTorch(t *testing.T) {
	for _, file := range []string{
		"../../testdata/reduce/reference.safetensors",
		"../../testdata/norm/reference.safetensors",
		"../../testdata/cross/reference.safetensors",
	} {
		ref, meta, err := modelfile.LoadSafetensors(file)
		if err != nil {
			t.Fatal(err)
		}
		var cases []torchCase
		if err := json.Unmarshal([]byte(meta["cases"]), &cases); err != nil || len(cases) == 0 {
			t.Fatalf("%s: no cases in the metadata (%v)", file, err)
		}
		for _, c := range cases {
			t.Run(c.Name, func(t *testing.T) { runTorchCase(t, c, ref) })
		}
	}
}

func runTorchCase(t *testing.T, c torchCase, ref map[string]*tensor.Tensor) {
	get := func(key string) *tensor.Tensor {
		t.Helper()
		v, ok := ref[c.Name+"."+key]
		if !ok {
			t.Fatalf("the reference has no %s.%s", c.Name, key)
		}
		return v
	}
	def, ok := ops.Lookup(c.Op)
	if !ok {
		t.Fatalf("unknown op %s", c.Op)
	}
	batch := c.Batch
	if batch == 0 {
		batch = 2
	}
	var params, state strings.Builder
	names := make([]string, len(c.Inputs))
	trains := false
	for i, kind := range c.Inputs {
		names[i] = fmt.Sprintf("x%d", i)
		in := get(fmt.Sprintf("in%d", i))
		decl := fmt.Sprintf("  %s: {shape: %s, dtype: %s}\n", names[i], yamlInts(in.Shape), in.DType)
		if kind == "param" {
			params.WriteString(decl)
			trains = true
		} else {
			state.WriteString(decl)
		}
	}
	outs := make([]string, c.Outputs)
	for i := range outs {
		outs[i] = fmt.Sprintf("y%d", i)
	}
	src := "psgraph: 1\nname: torchcase\n"
	if params.Len() > 0 {
		src += "params:\n" + params.String()
	}
	if trains {
		state.WriteString(fmt.Sprintf("  R: {shape: %s}\n", yamlInts(get("R").Shape)))
	}
	if state.Len() > 0 {
		src += "state:\n" + state.String()
	}
	src += fmt.Sprintf("ops:\n  - {type: %s, inputs: [%s], outputs: [%s]", c.Op, strings.Join(names, ", "), strings.Join(outs, ", "))
	if c.Attrs != "" {
		src += ", attrs: " + c.Attrs
	}
	src += "}\n"
	if trains {
		src += "  - {type: mul, inputs: [y0, R], outputs: [yr]}\n  - {type: sum, inputs: [yr], outputs: [loss]}\n"
	}
	if len(def.Updates) > 0 {
		src += "assign:\n"
		for _, u := range def.Updates {
			src += fmt.Sprintf("  %s: %s\n", names[u.In], outs[u.Out])
		}
	}
	if trains {
		src += fmt.Sprintf("train: {loss: loss, batch: %d}\n", batch)
	} else {
		src += fmt.Sprintf("train: {batch: %d}\n", batch)
	}
	g, err := dsl.Parse("torchcase.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if trains {
		if err := g.Differentiate(); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Check(); err != nil {
		t.Fatal(err)
	}
	opt := program.CompileOptions{Batch: batch, Workers: 1, KeepTemps: true}
	if c.Mode == "eval" {
		opt.Targets = outs
	}
	prog, err := program.Compile(g, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	for i, n := range names {
		prog.Scope[n].CopyFrom(get(fmt.Sprintf("in%d", i)))
	}
	if trains {
		prog.Scope["R"].CopyFrom(get("R"))
	}
	if err := runOnce(t, prog); err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		got := prog.Scope[o]
		for _, u := range def.Updates {
			if u.Out == i && c.Mode != "eval" {
				// The step's assign moved the next value into the state.
				o, got = names[u.In], prog.Scope[names[u.In]]
			}
		}
		compareTo(t, o, got, get(fmt.Sprintf("out%d", i)))
	}
	for i, kind := range c.Inputs {
		if kind == "param" {
			compareTo(t, dsl.GradName(names[i]), prog.Scope[dsl.GradName(names[i])], get(fmt.Sprintf("grad%d", i)))
		}
	}
	rt := &program.Runtime{Ctx: context.Background()}
	if a := testing.AllocsPerRun(3, func() { prog.Run(rt) }); a != 0 {
		t.Errorf("a step allocates %.0f times, want 0", a)
	}
}

// compareTo checks a tensor against torch's: same shape, ids equal, floats
// within 1e-5 + 1e-4 relative (float32 rounding in a different order).
func compareTo(t *testing.T, what string, got, want *tensor.Tensor) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: not computed", what)
	}
	if got.DType != want.DType || got.Numel() != want.Numel() {
		t.Fatalf("%s is %s%v, torch's %s%v", what, got.DType, got.Shape, want.DType, want.Shape)
	}
	if want.DType == tensor.I32 {
		for i := range want.I {
			if got.I[i] != want.I[i] {
				t.Errorf("%s[%d] = %d, torch %d", what, i, got.I[i], want.I[i])
			}
		}
		return
	}
	if want.DType == tensor.I64 {
		for i := range want.L {
			if got.L[i] != want.L[i] {
				t.Errorf("%s[%d] = %d, torch %d", what, i, got.L[i], want.L[i])
			}
		}
		return
	}
	for i, w := range want.F {
		g := got.F[i]
		if math.IsInf(float64(w), 0) && g == w {
			continue
		}
		if d := math.Abs(float64(g) - float64(w)); !(d <= 1e-5+1e-4*math.Abs(float64(w))) {
			t.Errorf("%s[%d] = %v, torch %v", what, i, g, w)
		}
	}
}
