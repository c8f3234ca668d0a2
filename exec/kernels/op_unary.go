package kernels

import (
	"math"

	"github.com/psgraph/psgraph/exec/blas"
)

// Element-wise unary ops and the helper ops their gradients use.

func init() {
	unary("relu", blas.Relu)
	// the activations and sqrt (adam's, adagrad's) run per element of
	// whole tensors: blas's vector kernels (float32, within 3 ulp of the
	// float64 functions: blas.Sigmoid, blas.Tanh)
	unary("sigmoid", blas.Sigmoid)
	unary("tanh", blas.Tanh)
	unary("sqrt", blas.Sqrt)
	register("identity", func(k Args) (Kernel, error) { return copyKernel(k.In[0], k.Out[0]), nil })
	binaryHelper("relu_grad", blas.ReluGrad)
	binaryHelper("sigmoid_grad", blas.SigmoidGrad)
	binaryHelper("tanh_grad", blas.TanhGrad)
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
