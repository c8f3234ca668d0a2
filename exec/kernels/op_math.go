package kernels

import (
	"math"

	"github.com/psgraph/psgraph/exec/blas"
)

// Element-wise math for schedules and clipping, and the step as a value.
// min, max, less and greater are binary ops (op_binary.go).

func init() {
	unaryF64("cos", math.Cos)
	unaryF64("sin", math.Sin)
	unary("exp", blas.Exp) // within 2 ulp of math.Exp, vectorized
	unaryF64("log", math.Log)
	unaryF64("floor", math.Floor)
	register("clip", func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		lo, hi := clipBounds(k)
		return func(Runtime) error {
			for i, v := range x.F[:len(y.F)] {
				y.F[i] = min(max(v, lo), hi)
			}
			return nil
		}, nil
	})
	register("clip_grad", func(k Args) (Kernel, error) {
		dy, x, dx := k.In[0], k.In[1], k.Out[0]
		lo, hi := clipBounds(k)
		return func(Runtime) error {
			xs := x.F[:len(dx.F)]
			for i, g := range dy.F[:len(dx.F)] {
				if v := xs[i]; v >= lo && v <= hi {
					dx.F[i] = g
				} else {
					dx.F[i] = 0
				}
			}
			return nil
		}, nil
	})
	register("sum_squares", func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		return func(Runtime) error {
			var s float64
			for _, v := range x.F {
				s += float64(v) * float64(v)
			}
			y.F[0] = float32(s)
			return nil
		}, nil
	})
	register("step", func(k Args) (Kernel, error) {
		y := k.Out[0]
		return func(rt Runtime) error {
			y.F[0] = float32(rt.Step() + 1)
			return nil
		}, nil
	})
}

func clipBounds(k Args) (lo, hi float32) {
	return float32(k.Attrs.Float("min")), float32(k.Attrs.Float("max"))
}
