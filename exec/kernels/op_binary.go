package kernels

import (
	"github.com/psgraph/psgraph/exec/blas"
)

// add, sub, mul, div with numpy broadcasting.

type binOp uint8

const (
	opAdd binOp = iota
	opSub
	opMul
	opDiv
	opMin
	opMax
	opLess
	opGreater
)

func init() {
	for name, op := range map[string]binOp{"add": opAdd, "sub": opSub, "mul": opMul, "div": opDiv,
		"min": opMin, "max": opMax, "less": opLess, "greater": opGreater} {
		register(name, func(k Args) (Kernel, error) { return binaryKernel(op, k), nil })
	}
}

func binaryKernel(op binOp, k Args) Kernel {
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
	if ok, colFirst := outerShapes(x.Shape, y.Shape, z.Shape); ok {
		col, row := x, y
		if !colFirst {
			col, row = y, x
		}
		return func(Runtime) error { binOuter(op, col.F, row.F, z.F, colFirst); return nil }
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
	case opDiv:
		return a / b
	case opMin:
		return min(a, b)
	case opMax:
		return max(a, b)
	case opLess:
		if a < b {
			return 1
		}
		return 0
	}
	if a > b { // opGreater
		return 1
	}
	return 0
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
		blas.Div(x, y, z)
	default:
		for i := range z {
			z[i] = apply(op, x[i], y[i])
		}
	}
}

// binRowsY: y repeats every len(y) elements of x (scalar or trailing suffix).
func binRowsY(op binOp, x, y, z []float32) {
	n := len(y)
	if n == 1 {
		s := y[0]
		x = x[:len(z)]
		// each through a vector kernel that computes exactly x op s:
		// 1*x + s is x + s; x + (-s) is x - s; s*x + (-0) is s*x
		switch op {
		case opAdd:
			blas.Scale(1, s, x, z)
		case opSub:
			blas.Scale(1, -s, x, z)
		case opMul:
			blas.Scale(s, negZero, x, z)
		case opDiv:
			blas.DivBy(x, s, z)
		default:
			for i := range z {
				z[i] = apply(op, x[i], s)
			}
		}
		return
	}
	for r := 0; r+n <= len(z); r += n {
		binSame(op, x[r:r+n], y, z[r:r+n])
	}
}

// binRowsX: x repeats every len(x) elements of y.
func binRowsX(op binOp, x, y, z []float32) {
	n := len(x)
	if n == 1 {
		s := x[0]
		y = y[:len(z)]
		switch op { // s op y exactly, as in binRowsY
		case opAdd:
			blas.Scale(1, s, y, z)
			return
		case opSub:
			blas.Scale(-1, s, y, z) // -y + s
			return
		case opMul:
			blas.Scale(s, negZero, y, z)
		default:
			for i := range z {
				z[i] = apply(op, s, y[i])
			}
		}
		return
	}
	for r := 0; r+n <= len(z); r += n {
		binSame(op, x, y[r:r+n], z[r:r+n])
	}
}
