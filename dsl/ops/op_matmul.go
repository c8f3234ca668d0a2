package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

func init() {
	register(&Def{
		Name: "matmul", Doc: "z = op(x) · op(y) for 2-D x and y, where op transposes when transpose_a / transpose_b is set",
		Inputs: []string{"x", "y"}, Outputs: []string{"z"},
		Attrs: []AttrSpec{
			{Name: "transpose_a", Kind: AttrBool, Default: false, Doc: "use x transposed"},
			{Name: "transpose_b", Kind: AttrBool, Default: false, Doc: "use y transposed"},
		},
		Infer: inferMatmul, Grad: gradMatmul,
	}, &Def{
		Name: "batch_matmul", Doc: "z[b] = op(x[b]) · op(y[b]) for 3-D x [B, M, K] and y [B, K, N], where op transposes the last two axes when transpose_a / transpose_b is set",
		Inputs: []string{"x", "y"}, Outputs: []string{"z"},
		Attrs: []AttrSpec{
			{Name: "transpose_a", Kind: AttrBool, Default: false, Doc: "use each x[b] transposed"},
			{Name: "transpose_b", Kind: AttrBool, Default: false, Doc: "use each y[b] transposed"},
		},
		Infer: inferBatchMatmul, Grad: gradMatmul,
	})
}

func inferBatchMatmul(in []Type, a Attrs) ([]Type, error) {
	x, y := in[0], in[1]
	if x.DType != ir.F32 || y.DType != ir.F32 {
		return nil, Errorf("inputs must be float32, got %v and %v", x, y)
	}
	if len(x.Shape) != 3 || len(y.Shape) != 3 {
		return nil, Errorf("inputs must be 3-D [B, M, K] and [B, K, N], got %v and %v", x.Shape, y.Shape)
	}
	if x.Shape[0] != y.Shape[0] {
		return nil, Errorf("batch dimensions differ: %v and %v", x.Shape, y.Shape)
	}
	m, k, k2, n := MatmulDims(x.Shape[1:], y.Shape[1:], a.Bool("transpose_a"), a.Bool("transpose_b"))
	if k != k2 {
		return nil, Errorf("inner dimensions differ: %v · %v (transpose_a=%v, transpose_b=%v): %d vs %d",
			x.Shape, y.Shape, a.Bool("transpose_a"), a.Bool("transpose_b"), k, k2)
	}
	return []Type{F32(x.Shape[0], m, n)}, nil
}

// MatmulDims returns the dimensions of op(a) [m, k] and op(b) [k2, n],
// op transposing when ta / tb is set.
func MatmulDims(a, b ir.Shape, ta, tb bool) (m, k, k2, n int) {
	m, k = a[0], a[1]
	if ta {
		m, k = k, m
	}
	k2, n = b[0], b[1]
	if tb {
		k2, n = n, k2
	}
	return
}

func inferMatmul(in []Type, a Attrs) ([]Type, error) {
	x, y := in[0], in[1]
	if x.DType != ir.F32 || y.DType != ir.F32 {
		return nil, Errorf("inputs must be float32, got %v and %v", x, y)
	}
	if len(x.Shape) != 2 || len(y.Shape) != 2 {
		return nil, Errorf("inputs must be 2-D, got %v and %v", x.Shape, y.Shape)
	}
	m, k, k2, n := MatmulDims(x.Shape, y.Shape, a.Bool("transpose_a"), a.Bool("transpose_b"))
	if k != k2 {
		return nil, Errorf("inner dimensions differ: %v · %v (transpose_a=%v, transpose_b=%v): %d vs %d",
			x.Shape, y.Shape, a.Bool("transpose_a"), a.Bool("transpose_b"), k, k2)
	}
	return []Type{F32(m, n)}, nil
}

// gradMatmul is the gradient of matmul and batch_matmul: products of the
// same kind (each batch's matrices for batch_matmul).
// transposes[a][b] are the attributes of a matmul with transpose_a a
// and transpose_b b (0 or 1), shared by the gradient rule's ops.
var transposes = func() (t [2][2]Attrs) {
	for a := range 2 {
		for b := range 2 {
			t[a][b] = Attrs{"transpose_a": a == 1, "transpose_b": b == 1}
		}
	}
	return t
}()

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func gradMatmul(b GradBuilder, g GradArgs) []string {
	x, y, dz := g.Inputs[0], g.Inputs[1], g.OutGrads[0]
	ta, tb := g.Attrs.Bool("transpose_a"), g.Attrs.Bool("transpose_b")
	op := "matmul"
	if len(b.Type(x).Shape) == 3 {
		op = "batch_matmul"
	}
	mm := func(p, q string, tp, tq bool) string {
		return b.Emit(op, []string{p, q}, transposes[b2i(tp)][b2i(tq)])
	}
	out := make([]string, 2)
	switch {
	case !ta && !tb: // z = x y
		if g.Need[0] {
			out[0] = mm(dz, y, false, true)
		}
		if g.Need[1] {
			out[1] = mm(x, dz, true, false)
		}
	case ta && !tb: // z = xᵀ y
		if g.Need[0] {
			out[0] = mm(y, dz, false, true)
		}
		if g.Need[1] {
			out[1] = mm(x, dz, false, false)
		}
	case !ta && tb: // z = x yᵀ
		if g.Need[0] {
			out[0] = mm(dz, y, false, false)
		}
		if g.Need[1] {
			out[1] = mm(dz, x, true, false)
		}
	default: // z = xᵀ yᵀ
		if g.Need[0] {
			out[0] = mm(y, dz, true, true)
		}
		if g.Need[1] {
			out[1] = mm(dz, x, true, true)
		}
	}
	return out
}
