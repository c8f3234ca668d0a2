package kernels

import (
	"math"

	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/blas"
	"github.com/psgraph/psgraph/exec/tensor"
)

// Reductions (sum, mean, reduce_max, logsumexp), broadcast_like,
// mean_grad, reduce_max_grad, logsumexp_grad and sum_to.

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
				blas.Add(yo, x.F[(o*n+j)*inner:(o*n+j+1)*inner], yo)
			}
			if mean {
				blas.Scale(scale, negZero, yo, yo)
			}
		}
		return nil
	}, nil
}

// reduceSpan splits x's elements for a reduction along attribute axis:
// outer blocks of n reduced entries each inner apart; without axis, one
// block of every element.
func reduceSpan(x *tensor.Tensor, a ops.Attrs) (outer, n, inner int) {
	if !a.Has("axis") {
		return 1, x.Numel(), 1
	}
	return split3(x.Shape, ops.NormAxis(a.Int("axis"), len(x.Shape)))
}

func init() {
	register("reduce_max", func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		outer, n, inner := reduceSpan(x, k.Attrs)
		return func(Runtime) error {
			for o := 0; o < outer; o++ {
				for i := 0; i < inner; i++ {
					base := o*n*inner + i
					m := x.F[base]
					for j := 1; j < n; j++ {
						if v := x.F[base+j*inner]; v > m || v != v { // NaN propagates, as in torch
							m = v
						}
					}
					y.F[o*inner+i] = m
				}
			}
			return nil
		}, nil
	})
	register("reduce_max_grad", func(k Args) (Kernel, error) {
		dy, x, dx := k.In[0], k.In[1], k.Out[0]
		outer, n, inner := reduceSpan(x, k.Attrs)
		return func(Runtime) error {
			clear(dx.F)
			for o := 0; o < outer; o++ {
				for i := 0; i < inner; i++ {
					base := o*n*inner + i
					at, m := base, x.F[base]
					for j := 1; j < n; j++ {
						if v := x.F[base+j*inner]; v > m || v != v && m == m { // strictly: a tie keeps the first
							at, m = base+j*inner, v
						}
					}
					dx.F[at] = dy.F[o*inner+i]
				}
			}
			return nil
		}, nil
	})
	register("logsumexp", func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		outer, n, inner := reduceSpan(x, k.Attrs)
		return func(Runtime) error {
			for o := 0; o < outer; o++ {
				for i := 0; i < inner; i++ {
					y.F[o*inner+i] = stridedLogSumExp(x.F, o*n*inner+i, n, inner)
				}
			}
			return nil
		}, nil
	})
	register("logsumexp_grad", func(k Args) (Kernel, error) {
		dy, x, y, dx := k.In[0], k.In[1], k.In[2], k.Out[0]
		outer, n, inner := reduceSpan(x, k.Attrs)
		return func(Runtime) error {
			for o := 0; o < outer; o++ {
				for i := 0; i < inner; i++ {
					g, lse := dy.F[o*inner+i], float64(y.F[o*inner+i])
					for j, at := 0, o*n*inner+i; j < n; j, at = j+1, at+inner {
						dx.F[at] = g * float32(math.Exp(float64(x.F[at])-lse))
					}
				}
			}
			return nil
		}, nil
	})
}

// stridedLogSumExp is log(sum(exp(v))) over n entries of v from base, step apart,
// shifted by their largest so that no exp overflows: -Inf when every
// entry is -Inf, +Inf when one is +Inf.
func stridedLogSumExp(v []float32, base, n, step int) float32 {
	m := v[base]
	for j := 1; j < n; j++ {
		m = max(m, v[base+j*step])
	}
	if math.IsInf(float64(m), 0) {
		return m
	}
	var s float64
	for j := 0; j < n; j++ {
		s += math.Exp(float64(v[base+j*step] - m))
	}
	return float32(float64(m) + math.Log(s))
}
