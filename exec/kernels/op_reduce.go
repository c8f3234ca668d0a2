package kernels

import (
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/blas"
)

// Reductions (sum, mean), broadcast_like, mean_grad and sum_to.

func init() {
	register("sum", func(k Args) (Kernel, error) { return reduceKernel(k, false) })
	register("mean", func(k Args) (Kernel, error) { return reduceKernel(k, true) })
	register("mean_grad", func(k Args) (Kernel, error) {
		dy, dx := k.In[0], k.Out[0]
		n := dx.Numel()
		if k.Attrs.Has("axis") {
			n = dx.Shape[ops.NormAxis(k.Attrs.Int("axis"), len(dx.Shape))]
		}
		inv := 1 / float32(max(n, 1))
		v := ops.VirtualShape(dy.Shape, dx.Shape, k.Attrs)
		it := newIndexer(v, v, dx.Shape)
		return func(Runtime) error {
			if len(dy.F) == 1 {
				s := dy.F[0] * inv
				for i := range dx.F {
					dx.F[i] = s
				}
				return nil
			}
			it.reset()
			for i := range dx.F {
				dx.F[i] = dy.F[it.ia] * inv
				it.next()
			}
			return nil
		}, nil
	})
	register("broadcast_like", func(k Args) (Kernel, error) {
		dy, y := k.In[0], k.Out[0]
		v := ops.VirtualShape(dy.Shape, y.Shape, k.Attrs)
		it := newIndexer(v, v, y.Shape)
		return func(Runtime) error {
			if len(dy.F) == 1 {
				s := dy.F[0]
				for i := range y.F {
					y.F[i] = s
				}
				return nil
			}
			it.reset()
			for i := range y.F {
				y.F[i] = dy.F[it.ia]
				it.next()
			}
			return nil
		}, nil
	})
	register("sum_to", func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		kind := classify(y.Shape, x.Shape)
		it := newIndexer(x.Shape, y.Shape, x.Shape)
		return func(Runtime) error {
			switch kind {
			case bcSame:
				copy(y.F, x.F)
			case bcScalar:
				var s float32
				for _, v := range x.F {
					s += v
				}
				y.F[0] = s
			case bcSuffix:
				blas.SumRows(x.F, len(x.F)/len(y.F), y.F)
			default:
				clear(y.F)
				it.reset()
				for _, v := range x.F {
					y.F[it.ib] += v
					it.next()
				}
			}
			return nil
		}, nil
	})
}

func reduceKernel(k Args, mean bool) (Kernel, error) {
	x, y := k.In[0], k.Out[0]
	if !k.Attrs.Has("axis") {
		inv := 1 / float64(max(x.Numel(), 1))
		return func(Runtime) error {
			var s float64
			for _, v := range x.F {
				s += float64(v)
			}
			if mean {
				s *= inv
			}
			y.F[0] = float32(s)
			return nil
		}, nil
	}
	ax := ops.NormAxis(k.Attrs.Int("axis"), len(x.Shape))
	outer := x.Shape[:ax].Numel()
	n := x.Shape[ax]
	inner := x.Shape[ax+1:].Numel()
	scale := float32(1)
	if mean {
		scale = 1 / float32(n)
	}
	return func(Runtime) error {
		clear(y.F)
		for o := 0; o < outer; o++ {
			yo := y.F[o*inner : (o+1)*inner]
			for j := 0; j < n; j++ {
				xo := x.F[(o*n+j)*inner : (o*n+j+1)*inner]
				for i, v := range xo {
					yo[i] += v
				}
			}
			if mean {
				for i := range yo {
					yo[i] *= scale
				}
			}
		}
		return nil
	}, nil
}
