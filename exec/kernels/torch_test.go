package kernels_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
)

// The recommender ops against torch: testdata/ops/gen_reference.py wrote,
// for each case, the inputs, an upstream gradient G, torch's output and
// torch's gradient of sum(output * G) for every float input. Here the
// op runs forward and through the backward pass autodiff generates, and
// both must match.

// refOperand is one input of the op in a reference case: the reference
// tensor named key, a parameter (its gradient is compared with grad) or,
// when grad is "", state.
type refOperand struct{ key, grad string }

type refCase struct {
	file, op, attrs string
	in              []refOperand
	out, g          string // torch's output and the upstream gradient
	tol             float64
}

// loadRef reads a reference file of testdata/ops.
func loadRef(t *testing.T, name string) map[string]*tensor.Tensor {
	t.Helper()
	ref, _, err := modelfile.LoadSafetensors("../../testdata/ops/" + name + ".safetensors")
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// checkAgainstTorch builds loss = sum(op(inputs) * G), runs it with
// autodiff's backward pass and compares the output and the gradients.
func checkAgainstTorch(t *testing.T, ref map[string]*tensor.Tensor, c refCase) {
	t.Helper()
	get := func(key string) *tensor.Tensor {
		r, ok := ref[key]
		if !ok {
			t.Fatalf("%s.safetensors has no tensor %q", c.file, key)
		}
		return r
	}
	var params, state strings.Builder
	names := make([]string, len(c.in))
	for i, x := range c.in {
		names[i] = fmt.Sprintf("x%d", i)
		r := get(x.key)
		decl := fmt.Sprintf("  %s: {shape: %s}\n", names[i], yamlInts(r.Shape))
		switch {
		case r.DType == tensor.I32:
			state.WriteString(fmt.Sprintf("  %s: {shape: %s, dtype: int32}\n", names[i], yamlInts(r.Shape)))
		case x.grad == "":
			state.WriteString(decl)
		default:
			params.WriteString(decl)
		}
	}
	gr := get(c.g)
	opLine := fmt.Sprintf("  - {type: %s, inputs: [%s], outputs: [y]", c.op, strings.Join(names, ", "))
	if c.attrs != "" {
		opLine += ", attrs: " + c.attrs
	}
	src := "psgraph: 1\nname: torchref\nparams:\n" + params.String() +
		"state:\n" + state.String() + fmt.Sprintf("  G: {shape: %s}\n", yamlInts(gr.Shape)) +
		"ops:\n" + opLine + "}\n" +
		"  - {type: mul, inputs: [y, G], outputs: [yg]}\n" +
		"  - {type: sum, inputs: [yg], outputs: [loss]}\n" +
		fmt.Sprintf("train: {loss: loss, batch: %d}\n", gr.Shape[0])
	g, err := dsl.Parse("torchref.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Differentiate(); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(); err != nil {
		t.Fatal(err)
	}
	prog, err := program.Compile(g, program.CompileOptions{Batch: gr.Shape[0], Workers: 1, KeepTemps: true})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	for i, x := range c.in {
		prog.Scope[names[i]].CopyFrom(get(x.key))
	}
	prog.Scope["G"].CopyFrom(gr)
	rt := &program.Runtime{Ctx: context.Background()}
	if err := prog.Run(rt); err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(3, func() { prog.Run(rt) }); a != 0 {
		t.Errorf("%s: a step allocates %.0f times, want 0", c.op, a)
	}
	compareRef(t, c.op+" "+c.attrs+" output", prog.Scope["y"], get(c.out), c.tol)
	for i, x := range c.in {
		if x.grad == "" {
			continue
		}
		got := prog.Scope[dsl.GradName(names[i])]
		if got.Rows != nil { // a row gradient: its rows in a dense tensor
			dense := tensor.New(tensor.F32, got.Shape)
			w := got.RowWidth()
			for k, r := range got.Rows.IDs {
				copy(dense.F[int(r)*w:], got.F[k*w:(k+1)*w])
			}
			got = dense
		}
		compareRef(t, fmt.Sprintf("%s %s gradient of input %d", c.op, c.attrs, i), got, get(x.grad), c.tol)
	}
}

// compareRef checks got against want element by element, relative to the
// largest element of want.
func compareRef(t *testing.T, what string, got, want *tensor.Tensor, tol float64) {
	t.Helper()
	if !got.Shape.Equal(want.Shape) {
		t.Fatalf("%s: shape %v, torch %v", what, got.Shape, want.Shape)
	}
	var scale float64
	for _, v := range want.F {
		scale = math.Max(scale, math.Abs(float64(v)))
	}
	if scale == 0 {
		t.Fatalf("%s: torch's values are all zero; the case does not discriminate", what)
	}
	bad := 0
	for i := range want.F {
		if d := math.Abs(float64(got.F[i]) - float64(want.F[i])); d > tol*scale {
			if bad < 5 {
				t.Errorf("%s: [%d] = %.7g, torch %.7g", what, i, got.F[i], want.F[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values differ from torch by more than %.0e of the largest", what, bad, len(want.F), tol)
	}
}

// embedding_bag in its three modes, with padding (in the middle, first, a
// bag of padding only), an id repeated in a bag and ids shared by bags.
func TestEmbeddingBagMatchesTorch(t *testing.T) {
	ref := loadRef(t, "embedding_bag")
	for _, mode := range []string{"sum", "mean", "sqrtn"} {
		checkAgainstTorch(t, ref, refCase{
			file: "embedding_bag", op: "embedding_bag", attrs: "{mode: " + mode + "}",
			in:  []refOperand{{"table", "dtable." + mode}, {"ids", ""}},
			out: "y." + mode, g: "G", tol: 1e-6,
		})
	}
}

// batch_matmul in every transpose combination: torch.bmm of the operands
// transposed likewise.
func TestBatchMatmulMatchesTorch(t *testing.T) {
	ref := loadRef(t, "batch_matmul")
	for _, c := range []string{"00", "01", "10", "11"} {
		checkAgainstTorch(t, ref, refCase{
			file: "batch_matmul", op: "batch_matmul",
			attrs: fmt.Sprintf("{transpose_a: %v, transpose_b: %v}", c[0] == '1', c[1] == '1'),
			in:    []refOperand{{"x." + c, "dx." + c}, {"y." + c, "dy." + c}},
			out:   "z." + c, g: "G." + c, tol: 1e-5,
		})
	}
}

// dot_interaction is facebookresearch/dlrm's "dot" interaction
// (interact_features: bmm, then the pairs (i, j), j < i, row-major; with
// self, j <= i), values and gradient, for a small case, DLRM's Criteo
// shape (27 vectors of 16) and 40 vectors (more than one GEMM tile).
func TestDotInteractionMatchesTorch(t *testing.T) {
	ref := loadRef(t, "dot_interaction")
	for _, name := range []string{"small", "dlrm", "wide"} {
		for _, self := range []bool{false, true} {
			key := name
			if self {
				key += ".self"
			}
			checkAgainstTorch(t, ref, refCase{
				file: "dot_interaction", op: "dot_interaction", attrs: fmt.Sprintf("{self: %v}", self),
				in:  []refOperand{{"x." + key, "dx." + key}},
				out: "z." + key, g: "G." + key, tol: 1e-5,
			})
		}
	}
}

// stack equals torch.stack along each axis.
func TestStackMatchesTorch(t *testing.T) {
	ref := loadRef(t, "stack")
	for axis := range 3 {
		p := compileModel(t, fmt.Sprintf(`psgraph: 1
state:
  x0: {shape: [3, 4]}
  x1: {shape: [3, 4]}
  x2: {shape: [3, 4]}
  x3: {shape: [3, 4]}
  x4: {shape: [3, 4]}
ops:
  - {type: stack, inputs: [x0, x1, x2, x3, x4], outputs: [y], attrs: {axis: %d}}
`, axis), 3)
		for i := range 5 {
			p.Scope[fmt.Sprintf("x%d", i)].CopyFrom(ref[fmt.Sprintf("x%d", i)])
		}
		if err := runOnce(t, p); err != nil {
			t.Fatal(err)
		}
		compareRef(t, fmt.Sprintf("stack axis %d", axis), p.Scope["y"], ref[fmt.Sprintf("y.%d", axis)], 0)
	}
}
