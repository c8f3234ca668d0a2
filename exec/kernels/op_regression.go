package kernels

import (
	"math"
)

// Element-wise losses: sigmoid_cross_entropy and mse, and their gradients;
// the regression metrics mae and rmse.

func init() {
	register("sigmoid_cross_entropy", func(k Args) (Kernel, error) {
		x, z, loss := k.In[0], k.In[1], k.Out[0]
		inv := 1 / float64(max(x.Numel(), 1))
		return func(Runtime) error {
			var total float64
			for i, v := range x.F {
				xv, zv := float64(v), float64(z.F[i])
				total += math.Max(xv, 0) - xv*zv + math.Log1p(math.Exp(-math.Abs(xv)))
			}
			loss.F[0] = float32(total * inv)
			return nil
		}, nil
	})
	register("sigmoid_cross_entropy_grad", func(k Args) (Kernel, error) {
		dloss, x, z, dx := k.In[0], k.In[1], k.In[2], k.Out[0]
		inv := 1 / float32(max(x.Numel(), 1))
		return func(Runtime) error {
			s := dloss.F[0] * inv
			zf := z.F[:len(dx.F)]
			for i, v := range x.F[:len(dx.F)] {
				dx.F[i] = s * (sigmoid(v) - zf[i])
			}
			return nil
		}, nil
	})
	register("mse", func(k Args) (Kernel, error) {
		p, t, loss := k.In[0], k.In[1], k.Out[0]
		return func(Runtime) error {
			loss.F[0] = float32(meanSquaredError(p.F, t.F))
			return nil
		}, nil
	})
	register("mae", func(k Args) (Kernel, error) {
		p, t, out := k.In[0], k.In[1], k.Out[0]
		inv := 1 / float64(max(p.Numel(), 1))
		return func(Runtime) error {
			var total float64
			for i, v := range p.F {
				total += math.Abs(float64(v) - float64(t.F[i]))
			}
			out.F[0] = float32(total * inv)
			return nil
		}, nil
	})
	register("rmse", func(k Args) (Kernel, error) {
		p, t, out := k.In[0], k.In[1], k.Out[0]
		return func(Runtime) error {
			out.F[0] = float32(math.Sqrt(meanSquaredError(p.F, t.F)))
			return nil
		}, nil
	})
	register("mse_grad", func(k Args) (Kernel, error) {
		dloss, p, t, dp := k.In[0], k.In[1], k.In[2], k.Out[0]
		inv := 2 / float32(max(p.Numel(), 1))
		return func(Runtime) error {
			s := dloss.F[0] * inv
			tf := t.F[:len(dp.F)]
			for i, v := range p.F[:len(dp.F)] {
				dp.F[i] = s * (v - tf[i])
			}
			return nil
		}, nil
	})
}

// meanSquaredError is the mean over p of (p - t)², in float64.
func meanSquaredError(p, t []float32) float64 {
	var total float64
	for i, v := range p {
		d := float64(v) - float64(t[i])
		total += d * d
	}
	return total / float64(max(len(p), 1))
}
