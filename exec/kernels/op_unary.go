package kernels

import (
	"math"

	"github.com/psgraph/psgraph/exec/blas"
)

// Element-wise unary ops and the helper ops their gradients use.

func init() {
	unary("relu", blas.Relu)
	unary("sigmoid", func(x, y []float32) {
		for i, v := range x[:len(y)] {
			y[i] = sigmoid(v)
		}
	})
	// tanh and sqrt run per element of activations and of adam's
	// updates: direct calls (math.Sqrt is an instruction), not through
	// unaryF64's func value
	unary("tanh", func(x, y []float32) {
		for i, v := range x[:len(y)] {
			y[i] = float32(math.Tanh(float64(v)))
		}
	})
	unary("sqrt", func(x, y []float32) {
		for i, v := range x[:len(y)] {
			y[i] = float32(math.Sqrt(float64(v)))
		}
	})
	register("identity", func(k Args) (Kernel, error) { return copyKernel(k.In[0], k.Out[0]), nil })
	binaryHelper("relu_grad", blas.ReluGrad)
	binaryHelper("sigmoid_grad", func(dy, y, dx []float32) {
		for i := range dx {
			dx[i] = dy[i] * y[i] * (1 - y[i])
		}
	})
	binaryHelper("tanh_grad", func(dy, y, dx []float32) {
		for i := range dx {
			dx[i] = dy[i] * (1 - y[i]*y[i])
		}
	})
	register("scale", func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		f, c := float32(k.Attrs.Float("factor")), float32(k.Attrs.Float("bias"))
		return func(Runtime) error { blas.Scale(f, c, x.F, y.F); return nil }, nil
	})
}

func sigmoid(v float32) float32 {
	if v >= 0 {
		return float32(1 / (1 + math.Exp(-float64(v))))
	}
	e := math.Exp(float64(v))
	return float32(e / (1 + e))
}

func unary(name string, f func(x, y []float32)) {
	register(name, func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		return func(Runtime) error { f(x.F, y.F); return nil }, nil
	})
}

// binaryHelper registers the kernel of a same-shape two-input op used by
// gradient rules.
func binaryHelper(name string, f func(a, b, out []float32)) {
	register(name, func(k Args) (Kernel, error) {
		a, b, out := k.In[0], k.In[1], k.Out[0]
		return func(Runtime) error { f(a.F, b.F[:len(out.F)], out.F[:len(a.F)]); return nil }, nil
	})
}

// unaryF64 registers an element-wise op computed in float64 by f.
func unaryF64(name string, f func(float64) float64) {
	unary(name, func(x, y []float32) {
		for i, v := range x[:len(y)] {
			y[i] = float32(f(float64(v)))
		}
	})
}
