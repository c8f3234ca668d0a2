package kernels_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/program"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"

	"github.com/psgraph/psgraph/exec/tensor"
)

// in describes one operand of a gradient-check case. Float operands are
// parameters (their gradient is checked) unless fixed is set; their values
// are drawn uniformly from [lo, hi], with a random sign when signed (so
// |x| >= lo keeps inputs away from kinks and poles). Int operands take ids.
type in struct {
	shape  []int
	lo, hi float64
	signed bool
	fixed  bool
	ids    []int32
	// distinct: the values are a random permutation of 0.1 * (0, 1, ...).
	distinct bool
}

func f32(lo, hi float64, shape ...int) in { return in{shape: shape, lo: lo, hi: hi} }

// away draws from ±[lo, hi].
func away(lo, hi float64, shape ...int) in { return in{shape: shape, lo: lo, hi: hi, signed: true} }

func fixed(x in) in { x.fixed = true; return x }

// distinct draws a permutation of 0, 0.1, 0.2, ...: every value unique.
func distinct(shape ...int) in { return in{shape: shape, distinct: true} }

func ids(shape []int, v ...int32) in { return in{shape: shape, ids: v} }

func sh(d ...int) []int { return d }

type gradCase struct {
	op    string
	in    []in
	attrs string // YAML flow mapping, "" for none
	batch int    // train.batch (what -1 in a shape attribute means); 0: 2
}

func std(shape ...int) in { return f32(-1, 1, shape...) }

// gradCases holds at least one case for every op with a gradient rule;
// TestGradientsMatchFiniteDifferences fails for an op without one.
var gradCases = []gradCase{
	// binary ops: same shapes and each broadcasting path (suffix, scalar, general, either side)
	{op: "add", in: []in{std(2, 3), std(2, 3)}},
	{op: "add", in: []in{std(2, 3), std(3)}},
	{op: "add", in: []in{std(3), std(2, 3)}},
	{op: "add", in: []in{std(2, 1), std(1, 3)}},
	{op: "add", in: []in{std(), std(2, 3)}},
	{op: "sub", in: []in{std(2, 3), std(2, 3)}},
	{op: "sub", in: []in{std(2, 3), std(3)}},
	{op: "sub", in: []in{std(1), std(2, 3)}},
	{op: "sub", in: []in{std(2, 1, 4), std(3, 1)}},
	{op: "mul", in: []in{std(2, 3), std(2, 3)}},
	{op: "mul", in: []in{std(2, 3), std(3)}},
	{op: "mul", in: []in{std(3), std(2, 3)}},
	{op: "mul", in: []in{std(2, 1), std(1, 3)}},
	{op: "mul", in: []in{std(2, 3), std()}},
	{op: "div", in: []in{std(2, 3), away(0.5, 2, 2, 3)}},
	{op: "div", in: []in{std(2, 3), away(0.5, 2, 3)}},
	{op: "div", in: []in{std(3), away(0.5, 2, 2, 3)}},
	{op: "div", in: []in{std(2, 1), away(0.5, 2, 1, 3)}},
	{op: "div", in: []in{std(2, 3), away(0.5, 2)}},
	// matmul: every transpose combination
	{op: "matmul", in: []in{std(2, 3), std(3, 4)}},
	{op: "matmul", in: []in{std(3, 2), std(3, 4)}, attrs: "{transpose_a: true}"},
	{op: "matmul", in: []in{std(2, 3), std(4, 3)}, attrs: "{transpose_b: true}"},
	{op: "matmul", in: []in{std(3, 2), std(4, 3)}, attrs: "{transpose_a: true, transpose_b: true}"},
	// batch_matmul: every transpose combination
	{op: "batch_matmul", in: []in{std(2, 2, 3), std(2, 3, 4)}},
	{op: "batch_matmul", in: []in{std(3, 3, 2), std(3, 3, 4)}, attrs: "{transpose_a: true}"},
	{op: "batch_matmul", in: []in{std(2, 2, 3), std(2, 4, 3)}, attrs: "{transpose_b: true}"},
	{op: "batch_matmul", in: []in{std(2, 3, 2), std(2, 4, 3)}, attrs: "{transpose_a: true, transpose_b: true}"},
	// unary
	{op: "relu", in: []in{away(0.1, 1, 3, 4)}},
	{op: "sigmoid", in: []in{f32(-3, 3, 3, 4)}},
	{op: "tanh", in: []in{f32(-2, 2, 3, 4)}},
	{op: "sqrt", in: []in{f32(0.5, 2, 3, 4)}},
	{op: "identity", in: []in{std(3, 4)}},
	{op: "cos", in: []in{f32(-3, 3, 3, 4)}},
	{op: "sin", in: []in{f32(-3, 3, 3, 4)}},
	{op: "exp", in: []in{f32(-2, 2, 3, 4)}},
	{op: "log", in: []in{f32(0.5, 3, 3, 4)}},
	// clip: the negative values pass, the positive ones are clipped, all 0.05 away from a bound
	{op: "clip", in: []in{away(0.35, 0.75, 3, 4)}, attrs: "{min: -0.8, max: 0.3}"},
	{op: "clip", in: []in{f32(-1, 1, 3, 4)}, attrs: "{min: -2}"},
	// dropout: the mask of the step (the same in every run of the check) is fixed, so y is linear in x
	{op: "dropout", in: []in{std(4, 5)}, attrs: "{rate: 0.3, seed: 7}"},
	{op: "sum_squares", in: []in{std(2, 3)}},
	{op: "min", in: []in{std(2, 3), std(2, 3)}},
	{op: "min", in: []in{std(2, 3), std()}},
	{op: "max", in: []in{std(2, 3), std(2, 3)}},
	{op: "max", in: []in{std(3), std(2, 3)}},
	{op: "scale", in: []in{std(3, 4)}, attrs: "{factor: 1.5, bias: 0.3}"},
	{op: "softmax", in: []in{f32(-2, 2, 3, 5)}},
	{op: "softmax", in: []in{f32(-2, 2, 4)}},
	{op: "softmax", in: []in{f32(-2, 2, 2, 2, 3)}},
	// reductions and their helpers, keepdims included
	{op: "sum", in: []in{std(2, 3)}, attrs: "{axis: 1, keepdims: true}"},
	{op: "sum", in: []in{std(2, 3, 4)}, attrs: "{axis: 0, keepdims: true}"},
	{op: "sum", in: []in{std(2, 3)}, attrs: "{keepdims: true}"},
	{op: "mean", in: []in{std(2, 3)}, attrs: "{axis: -1, keepdims: true}"},
	{op: "mean", in: []in{std(2, 3, 4)}, attrs: "{axis: 1, keepdims: true}"},
	{op: "mean", in: []in{std(2, 3)}, attrs: "{keepdims: true}"},
	{op: "mean_grad", in: []in{std(2, 1), fixed(std(2, 3))}, attrs: "{axis: 1, keepdims: true}"},
	{op: "broadcast_like", in: []in{std(1, 3), fixed(std(2, 3))}, attrs: "{axis: 0, keepdims: true}"},
	// reduce_max: distinct values (the maximum is unique and 0.1 away from
	// the next, beyond eps) keep the finite differences off the kinks
	{op: "reduce_max", in: []in{distinct(2, 5)}},
	{op: "reduce_max", in: []in{distinct(3, 4)}, attrs: "{axis: 1}"},
	{op: "reduce_max", in: []in{distinct(3, 4)}, attrs: "{axis: 0, keepdims: true}"},
	{op: "reduce_max", in: []in{distinct(2, 3, 4)}, attrs: "{axis: -2}"},
	{op: "logsumexp", in: []in{f32(-3, 3, 2, 5)}},
	{op: "logsumexp", in: []in{f32(-3, 3, 3, 4)}, attrs: "{axis: 1}"},
	{op: "logsumexp", in: []in{f32(-3, 3, 3, 4)}, attrs: "{axis: 0, keepdims: true}"},
	{op: "logsumexp", in: []in{f32(-3, 3, 2, 3, 4)}, attrs: "{axis: 1, keepdims: true}"},
	// normalization
	{op: "standardize", in: []in{std(4, 3)}, attrs: "{axis: 0}"},
	{op: "standardize", in: []in{std(2, 3, 5)}, attrs: "{axis: -1, eps: 0.01}"},
	{op: "standardize", in: []in{std(2, 3, 4)}, attrs: "{axis: 1}"},
	{op: "layer_norm", in: []in{std(3, 5), f32(0.5, 1.5, 5), std(5)}},
	{op: "layer_norm", in: []in{std(2, 3, 4), f32(0.5, 1.5, 4), std(4)}, attrs: "{eps: 0.1}"},
	{op: "batch_norm", in: []in{std(5, 3), f32(0.5, 1.5, 3), std(3), fixed(std(3)), fixed(f32(0.5, 2, 3))}, batch: 5},
	{op: "batch_norm", in: []in{std(4, 2), f32(0.5, 1.5, 2), std(2), fixed(std(2)), fixed(f32(0.5, 2, 2))}, attrs: "{eps: 0.01, momentum: 0.3}"},
	{op: "sum", in: []in{std(2, 3)}},
	{op: "sum", in: []in{std(2, 3)}, attrs: "{axis: 0}"},
	{op: "sum", in: []in{std(2, 3, 4)}, attrs: "{axis: 1}"},
	{op: "sum", in: []in{std(2, 3, 4)}, attrs: "{axis: -1}"},
	{op: "mean", in: []in{std(2, 3)}},
	{op: "mean", in: []in{std(2, 3)}, attrs: "{axis: 1}"},
	{op: "mean", in: []in{std(2, 3, 4)}, attrs: "{axis: 0}"},
	{op: "mean", in: []in{std(2, 3, 4)}, attrs: "{axis: -2}"},
	{op: "mean_grad", in: []in{std(), fixed(std(2, 3))}},
	{op: "mean_grad", in: []in{std(3), fixed(std(2, 3))}, attrs: "{axis: 0}"},
	{op: "mean_grad", in: []in{std(2, 4), fixed(std(2, 3, 4))}, attrs: "{axis: -2}"},
	{op: "broadcast_like", in: []in{std(), fixed(std(2, 3))}},
	{op: "broadcast_like", in: []in{std(3), fixed(std(2, 3))}},
	{op: "broadcast_like", in: []in{std(2, 1), fixed(std(2, 3))}},
	{op: "broadcast_like", in: []in{std(2), fixed(std(2, 3))}, attrs: "{axis: 1}"},
	{op: "broadcast_like", in: []in{std(2, 4), fixed(std(2, 3, 4))}, attrs: "{axis: 1}"},
	{op: "sum_to", in: []in{std(2, 3), fixed(std(2, 3))}},
	{op: "sum_to", in: []in{std(2, 3), fixed(std())}},
	{op: "sum_to", in: []in{std(2, 3), fixed(std(3))}},
	{op: "sum_to", in: []in{std(2, 3), fixed(std(2, 1))}},
	{op: "sum_to", in: []in{std(2, 3, 4), fixed(std(2, 1, 4))}},
	// losses
	{op: "softmax_cross_entropy", in: []in{f32(-2, 2, 3, 4), ids(sh(3), 1, 3, 0)}},
	{op: "sigmoid_cross_entropy", in: []in{f32(-3, 3, 2, 3), fixed(f32(0, 1, 2, 3))}},
	{op: "sigmoid_cross_entropy", in: []in{f32(-3, 3, 5), fixed(f32(0, 1, 5))}},
	{op: "mse", in: []in{std(2, 3), std(2, 3)}},
	{op: "mse", in: []in{std(4), std(4)}},
	// rows
	{op: "slice_rows", in: []in{std(4, 3)}, attrs: "{start: 1, end: 3}"},
	{op: "slice_rows", in: []in{std(2, 5)}, attrs: "{start: 2, end: 5, axis: 1}"},
	{op: "slice_rows", in: []in{std(2, 3, 4)}, attrs: "{start: 0, end: 2, axis: -1}"},
	{op: "pad_rows", in: []in{std(2, 3)}, attrs: "{start: 1, size: 4}"},
	{op: "pad_rows", in: []in{std(2, 3)}, attrs: "{start: 2, size: 5, axis: 1}"},
	{op: "concat", in: []in{std(2, 3), std(1, 3)}},
	{op: "concat", in: []in{std(2, 3), std(2, 1), std(2, 2)}, attrs: "{axis: 1}"},
	{op: "concat", in: []in{std(2, 2, 3), std(2, 1, 3)}, attrs: "{axis: -2}"},
	{op: "stack", in: []in{std(2, 3), std(2, 3), std(2, 3)}},
	{op: "stack", in: []in{std(2, 3), std(2, 3)}, attrs: "{axis: 0}"},
	{op: "stack", in: []in{std(2, 3), std(2, 3)}, attrs: "{axis: -1}"},
	// dot_interaction: the strict triangle, and with the diagonal; F = 20
	// spans more than one GEMM tile, B = 17 more than one chunk
	{op: "dot_interaction", in: []in{std(2, 4, 3)}},
	{op: "dot_interaction", in: []in{std(2, 4, 3)}, attrs: "{self: true}"},
	{op: "dot_interaction", in: []in{std(17, 3, 2)}},
	{op: "dot_interaction", in: []in{std(1, 20, 2)}, attrs: "{self: true}"},
	// shapes
	{op: "reshape", in: []in{std(2, 3)}, attrs: "{shape: [6]}"},
	{op: "reshape", in: []in{std(4, 6)}, attrs: "{shape: [4, 3, 2]}"},
	{op: "reshape_like", in: []in{std(2, 3), fixed(std(3, 2))}},
	{op: "transpose", in: []in{std(2, 3)}},
	{op: "transpose", in: []in{std(2, 3, 4)}},
	{op: "transpose", in: []in{std(2, 3, 4)}, attrs: "{perm: [1, 0, 2]}"},
	{op: "transpose", in: []in{std(2, 3, 4)}, attrs: "{perm: [2, 0, 1]}"},
	// embeddings; repeated ids check the scatter-add
	{op: "lookup_table", in: []in{std(5, 3), ids(sh(2, 3), 4, 0, 2, 2, 4, 1)}},
	{op: "lookup_table", in: []in{std(5, 2), ids(sh(4), 3, 3, 0, 3)}},
	// embedding_bag: padding (-1) anywhere, an id repeated in a bag and
	// shared by bags, a bag of padding only
	{op: "embedding_bag", in: []in{std(5, 3), ids(sh(3, 4), 4, -1, 2, 4, -1, -1, -1, -1, 0, 2, 2, 1)}},
	{op: "embedding_bag", in: []in{std(5, 3), ids(sh(3, 4), 4, -1, 2, 4, -1, -1, -1, -1, 0, 2, 2, 1)}, attrs: "{mode: mean}"},
	{op: "embedding_bag", in: []in{std(5, 3), ids(sh(3, 4), 4, -1, 2, 4, -1, -1, -1, -1, 0, 2, 2, 1)}, attrs: "{mode: sqrtn}"},
	{op: "embedding_bag", in: []in{std(6, 2), ids(sh(2, 2, 3), 5, -1, 5, 0, 1, 2, -1, 3, -1, 4, 4, 4)}, attrs: "{mode: mean}"},
}

// TestGradientsMatchFiniteDifferences checks every gradient rule of the
// catalog against central differences of the float32 kernels: for a case
// y = op(inputs), loss = sum(y * R) with a fixed random R, the X@GRAD that
// autodiff generates must match (loss(X + eps) - loss(X - eps)) / 2eps
// element by element.
func TestGradientsMatchFiniteDifferences(t *testing.T) {
	byOp := map[string][]gradCase{}
	for _, c := range gradCases {
		if _, ok := ops.Lookup(c.op); !ok {
			t.Fatalf("case for unknown op %s", c.op)
		}
		byOp[c.op] = append(byOp[c.op], c)
	}
	for _, name := range ops.Names() {
		def, _ := ops.Lookup(name)
		if def.Grad == nil {
			if len(byOp[name]) > 0 {
				t.Errorf("op %s has gradient-check cases but no gradient rule", name)
			}
			continue
		}
		if len(byOp[name]) == 0 {
			t.Errorf("op %s has a gradient rule but no gradient-check case in gradCases", name)
			continue
		}
		for i, c := range byOp[name] {
			t.Run(fmt.Sprintf("%s/%d", name, i), func(t *testing.T) { checkGradient(t, c, uint64(1000+i)) })
		}
	}
}

// The tolerance is relative, per element and to the largest gradient
// element (scalar losses have gradients of order 1/numel); float32
// rounding of the loss contributes ~1e-5 here and the O(eps²) truncation
// error ~1e-4 of the gradient scale, far below what a wrong rule gives.
const (
	gcEps   = 1e-2
	gcRtol  = 1e-2 // of |numeric|
	gcScale = 1e-2 // of max |numeric| over the operand
	gcFloor = 1e-5
)

func checkGradient(t *testing.T, c gradCase, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	batch := c.batch
	if batch == 0 {
		batch = 2
	}
	names := make([]string, len(c.in))
	for i := range c.in {
		names[i] = fmt.Sprintf("x%d", i)
	}
	// The loss reads the op's first output; an op that updates state
	// (batch_norm) has its next values assigned, as a model must.
	def, _ := ops.Lookup(c.op)
	outs := []string{"y"}
	for i := 1; i < len(def.Outputs); i++ {
		outs = append(outs, fmt.Sprintf("y%d", i))
	}
	assigns := ""
	for _, u := range def.Updates {
		assigns += fmt.Sprintf("  %s: %s\n", names[u.In], outs[u.Out])
	}
	if assigns != "" {
		assigns = "assign:\n" + assigns
	}
	opLine := fmt.Sprintf("  - {type: %s, inputs: [%s], outputs: [%s]", c.op, strings.Join(names, ", "), strings.Join(outs, ", "))
	if c.attrs != "" {
		opLine += ", attrs: " + c.attrs
	}
	opLine += "}\n"
	var params, state strings.Builder
	for i, x := range c.in {
		decl := fmt.Sprintf("  %s: {shape: %s}\n", names[i], yamlInts(x.shape))
		switch {
		case x.ids != nil:
			decl = fmt.Sprintf("  %s: {shape: %s, dtype: int32}\n", names[i], yamlInts(x.shape))
			state.WriteString(decl)
		case x.fixed:
			state.WriteString(decl)
		default:
			params.WriteString(decl)
		}
	}
	head := "psgraph: 1\nname: gradcheck\nparams:\n" + params.String()
	// First pass: the output's shape, for R.
	g0, err := dsl.Parse("gradcheck.yaml", []byte(head+"state:\n"+state.String()+"  R0: {shape: [1]}\nops:\n"+opLine+assigns))
	if err != nil {
		t.Fatal(err)
	}
	types, err := g0.Infer(batch)
	if err != nil {
		t.Fatal(err)
	}
	yt := types["y"]
	if yt.DType != tensor.F32 {
		t.Fatalf("output is %v", yt)
	}
	src := head + "state:\n" + state.String() + fmt.Sprintf("  R: {shape: %s}\n", yamlInts(yt.Shape)) +
		"ops:\n" + opLine +
		"  - {type: mul, inputs: [y, R], outputs: [yr]}\n" +
		"  - {type: sum, inputs: [yr], outputs: [loss]}\n" +
		assigns + fmt.Sprintf("train: {loss: loss, batch: %d}\n", batch)
	g, err := dsl.Parse("gradcheck.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Differentiate(); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(); err != nil {
		t.Fatal(err)
	}
	prog, err := program.Compile(g, program.CompileOptions{Batch: batch, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	for i, x := range c.in {
		tt := prog.Scope[names[i]]
		if x.ids != nil {
			copy(tt.I, x.ids)
			continue
		}
		if x.distinct {
			for j, k := range rng.Perm(len(tt.F)) {
				tt.F[j] = 0.1 * float32(k)
			}
			continue
		}
		for j := range tt.F {
			v := x.lo + (x.hi-x.lo)*rng.Float64()
			if x.signed && rng.IntN(2) == 0 {
				v = -v
			}
			tt.F[j] = float32(v)
		}
	}
	for j := range prog.Scope["R"].F {
		prog.Scope["R"].F[j] = float32(2*rng.Float64() - 1)
	}
	rt := &program.Runtime{Ctx: context.Background()}
	run := func() float64 {
		if err := prog.Run(rt); err != nil {
			t.Fatal(err)
		}
		return float64(prog.Scope["loss"].F[0])
	}
	run()
	if a := testing.AllocsPerRun(3, func() { run() }); a != 0 {
		t.Errorf("a step allocates %.0f times, want 0", a)
	}
	checked := 0
	for i, x := range c.in {
		if x.ids != nil || x.fixed {
			continue
		}
		run()
		gt, ok := prog.Scope[dsl.GradName(names[i])]
		if !ok {
			t.Fatalf("autodiff produced no %s", dsl.GradName(names[i]))
		}
		analytic := append([]float32{}, gt.F...)
		if gt.Rows != nil { // a row gradient: its rows in a dense tensor
			analytic = make([]float32, prog.Scope[names[i]].Numel())
			w := gt.RowWidth()
			for k, r := range gt.Rows.IDs {
				copy(analytic[int(r)*w:], gt.F[k*w:(k+1)*w])
			}
		}
		p := prog.Scope[names[i]].F
		numeric := make([]float64, len(p))
		var biggest float64
		for j := range p {
			v := p[j]
			p[j] = v + gcEps
			lp := run()
			p[j] = v - gcEps
			lm := run()
			p[j] = v
			numeric[j] = (lp - lm) / (2 * gcEps)
			biggest = math.Max(biggest, math.Abs(numeric[j]))
		}
		for j, num := range numeric {
			if d := math.Abs(float64(analytic[j]) - num); d > gcFloor+gcRtol*math.Abs(num)+gcScale*biggest {
				t.Errorf("%s(%s): d loss / d %s[%d] = %.6f by autodiff, %.6f by central differences",
					c.op, c.attrs, names[i], j, analytic[j], num)
			}
		}
		if biggest < 1e-3 {
			t.Errorf("%s: gradient of %s is ~0 everywhere (max %.2g): the case does not discriminate", c.op, names[i], biggest)
		}
		checked++
	}
	if checked == 0 {
		t.Fatalf("case has no parameter to check")
	}
}

func yamlInts(s []int) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
