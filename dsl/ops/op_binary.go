package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/blas"
)

// add, sub, mul, div with numpy broadcasting.

type binOp uint8

const (
	opAdd binOp = iota
	opSub
	opMul
	opDiv
)

func init() {
	for _, b := range []struct {
		name string
		op   binOp
		doc  string
		grad func(b GradBuilder, g GradArgs) []string
	}{
		{"add", opAdd, "z = x + y", gradAdd},
		{"sub", opSub, "z = x - y", gradSub},
		{"mul", opMul, "z = x * y (element-wise)", gradMul},
		{"div", opDiv, "z = x / y (element-wise)", gradDiv},
	} {
		op := b.op
		register(&Def{
			Name: b.name, Doc: b.doc + ", numpy-style broadcasting",
			Inputs: []string{"x", "y"}, Outputs: []string{"z"},
			Infer:       inferBinary,
			Grad:        b.grad,
			Kernel:      func(k KernelArgs) (Kernel, error) { return binaryKernel(op, k), nil },
			ElementWise: true,
		})
	}
}

func inferBinary(in []Type, _ Attrs) ([]Type, error) {
	if in[0].DType != ir.F32 || in[1].DType != ir.F32 {
		return nil, Errorf("inputs must be float32, got %v and %v", in[0], in[1])
	}
	s, err := BroadcastShape(in[0].Shape, in[1].Shape)
	if err != nil {
		return nil, err
	}
	return []Type{{DType: ir.F32, Shape: s}}, nil
}

// sumTo reduces a gradient to the shape of the input it belongs to.
func sumTo(b GradBuilder, grad, like string) string {
	if b.Type(grad).Shape.Equal(b.Type(like).Shape) {
		return grad
	}
	return b.Emit("sum_to", []string{grad, like}, nil)
}

func gradAdd(b GradBuilder, g GradArgs) []string {
	dz := g.OutGrads[0]
	out := make([]string, 2)
	if g.Need[0] {
		out[0] = sumTo(b, dz, g.Inputs[0])
	}
	if g.Need[1] {
		out[1] = sumTo(b, dz, g.Inputs[1])
	}
	return out
}

func gradSub(b GradBuilder, g GradArgs) []string {
	dz := g.OutGrads[0]
	out := make([]string, 2)
	if g.Need[0] {
		out[0] = sumTo(b, dz, g.Inputs[0])
	}
	if g.Need[1] {
		out[1] = sumTo(b, b.Emit("scale", []string{dz}, Attrs{"factor": -1.0}), g.Inputs[1])
	}
	return out
}

func gradMul(b GradBuilder, g GradArgs) []string {
	dz, x, y := g.OutGrads[0], g.Inputs[0], g.Inputs[1]
	out := make([]string, 2)
	if g.Need[0] {
		out[0] = sumTo(b, b.Emit("mul", []string{dz, y}, nil), x)
	}
	if g.Need[1] {
		out[1] = sumTo(b, b.Emit("mul", []string{dz, x}, nil), y)
	}
	return out
}

func gradDiv(b GradBuilder, g GradArgs) []string {
	dz, x, y, z := g.OutGrads[0], g.Inputs[0], g.Inputs[1], g.Outputs[0]
	out := make([]string, 2)
	if g.Need[0] {
		out[0] = sumTo(b, b.Emit("div", []string{dz, y}, nil), x)
	}
	if g.Need[1] {
		// dy = -dz * z / y
		t := b.Emit("div", []string{b.Emit("mul", []string{dz, z}, nil), y}, nil)
		out[1] = sumTo(b, b.Emit("scale", []string{t}, Attrs{"factor": -1.0}), y)
	}
	return out
}

func binaryKernel(op binOp, k KernelArgs) Kernel {
	x, y, z := k.In[0], k.In[1], k.Out[0]
	kx, ky := classify(x.Shape, z.Shape), classify(y.Shape, z.Shape)
	switch {
	case kx == bcSame && ky == bcSame:
		return func(Runtime) error { binSame(op, x.F, y.F, z.F); return nil }
	case kx == bcSame && (ky == bcScalar || ky == bcSuffix):
		return func(Runtime) error { binRowsY(op, x.F, y.F, z.F); return nil }
	case ky == bcSame && (kx == bcScalar || kx == bcSuffix):
		return func(Runtime) error { binRowsX(op, x.F, y.F, z.F); return nil }
	}
	it := newIndexer(x.Shape, y.Shape, z.Shape)
	return func(Runtime) error {
		it.reset()
		xf, yf, zf := x.F, y.F, z.F
		for i := range zf {
			zf[i] = apply(op, xf[it.ia], yf[it.ib])
			it.next()
		}
		return nil
	}
}

func apply(op binOp, a, b float32) float32 {
	switch op {
	case opAdd:
		return a + b
	case opSub:
		return a - b
	case opMul:
		return a * b
	}
	return a / b
}

func binSame(op binOp, x, y, z []float32) {
	y = y[:len(z)]
	x = x[:len(z)]
	switch op {
	case opAdd:
		blas.Add(x, y, z)
	case opSub:
		blas.Sub(x, y, z)
	case opMul:
		blas.Mul(x, y, z)
	case opDiv:
		for i := range z {
			z[i] = x[i] / y[i]
		}
	}
}

// binRowsY: y repeats every len(y) elements of x (scalar or trailing suffix).
func binRowsY(op binOp, x, y, z []float32) {
	n := len(y)
	if n == 1 {
		s := y[0]
		switch op {
		case opAdd:
			for i := range z {
				z[i] = x[i] + s
			}
		case opSub:
			for i := range z {
				z[i] = x[i] - s
			}
		case opMul:
			for i := range z {
				z[i] = x[i] * s
			}
		case opDiv:
			for i := range z {
				z[i] = x[i] / s
			}
		}
		return
	}
	for r := 0; r+n <= len(z); r += n {
		xr, zr := x[r:r+n], z[r:r+n]
		switch op {
		case opAdd:
			blas.Add(xr, y, zr)
		case opSub:
			blas.Sub(xr, y, zr)
		case opMul:
			blas.Mul(xr, y, zr)
		case opDiv:
			for j := range zr {
				zr[j] = xr[j] / y[j]
			}
		}
	}
}

// binRowsX: x repeats every len(x) elements of y.
func binRowsX(op binOp, x, y, z []float32) {
	n := len(x)
	for r := 0; r+n <= len(z); r += n {
		yr, zr := y[r:r+n], z[r:r+n]
		for j := range zr {
			zr[j] = apply(op, x[j%n], yr[j])
		}
	}
}
