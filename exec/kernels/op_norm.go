package kernels

import (
	"fmt"
	"math"

	"github.com/psgraph/psgraph/dsl/ops"
)

// layer_norm, batch_norm, standardize and standardize_grad. Statistics are
// summed in float64; a span is n entries of a flat slice, step apart.

// spanStats returns the mean and 1/sqrt(biased var + eps) of n entries of
// v from base, step apart.
func spanStats(v []float32, base, n, step int, eps float64) (mean, invStd float64) {
	var s float64
	for j, at := 0, base; j < n; j, at = j+1, at+step {
		s += float64(v[at])
	}
	mean = s / float64(n)
	var q float64
	for j, at := 0, base; j < n; j, at = j+1, at+step {
		d := float64(v[at]) - mean
		q += d * d
	}
	return mean, 1 / math.Sqrt(q/float64(n)+eps)
}

// standardizeGrad writes dx of y = standardize(x) over one span.
func standardizeGrad(dy, x, dx []float32, base, n, step int, eps float64) {
	mean, inv := spanStats(x, base, n, step, eps)
	var sg, sgx float64
	for j, at := 0, base; j < n; j, at = j+1, at+step {
		g := float64(dy[at])
		sg += g
		sgx += g * (float64(x[at]) - mean) * inv
	}
	sg /= float64(n)
	sgx /= float64(n)
	for j, at := 0, base; j < n; j, at = j+1, at+step {
		xhat := (float64(x[at]) - mean) * inv
		dx[at] = float32(inv * (float64(dy[at]) - sg - xhat*sgx))
	}
}

// axisSpans returns the spans of a normalization along axis of a shape.
func axisSpans(k Args, x int) (outer, n, inner int) {
	t := k.In[x]
	return split3(t.Shape, ops.NormAxis(k.Attrs.Int("axis"), len(t.Shape)))
}

func init() {
	register("standardize", func(k Args) (Kernel, error) {
		x, y, eps := k.In[0], k.Out[0], k.Attrs.Float("eps")
		outer, n, inner := axisSpans(k, 0)
		return func(Runtime) error {
			for o := 0; o < outer; o++ {
				for i := 0; i < inner; i++ {
					base := o*n*inner + i
					mean, inv := spanStats(x.F, base, n, inner, eps)
					for j, at := 0, base; j < n; j, at = j+1, at+inner {
						y.F[at] = float32((float64(x.F[at]) - mean) * inv)
					}
				}
			}
			return nil
		}, nil
	})
	register("standardize_grad", func(k Args) (Kernel, error) {
		dy, x, dx, eps := k.In[0], k.In[1], k.Out[0], k.Attrs.Float("eps")
		outer, n, inner := axisSpans(k, 1)
		return func(Runtime) error {
			for o := 0; o < outer; o++ {
				for i := 0; i < inner; i++ {
					standardizeGrad(dy.F, x.F, dx.F, o*n*inner+i, n, inner, eps)
				}
			}
			return nil
		}, nil
	})
	register("layer_norm", func(k Args) (Kernel, error) {
		x, gamma, beta, y, eps := k.In[0], k.In[1], k.In[2], k.Out[0], k.Attrs.Float("eps")
		d := x.Shape[len(x.Shape)-1]
		rows := x.Numel() / max(d, 1)
		return func(Runtime) error {
			for r := 0; r < rows; r++ {
				mean, inv := spanStats(x.F, r*d, d, 1, eps)
				xr, yr := x.F[r*d:(r+1)*d], y.F[r*d:(r+1)*d]
				for j, v := range xr {
					yr[j] = gamma.F[j]*float32((float64(v)-mean)*inv) + beta.F[j]
				}
			}
			return nil
		}, nil
	})
	register("batch_norm", func(k Args) (Kernel, error) {
		x, gamma, beta, runMean, runVar := k.In[0], k.In[1], k.In[2], k.In[3], k.In[4]
		y, meanNext, varNext := k.Out[0], k.Out[1], k.Out[2]
		eps, m := k.Attrs.Float("eps"), k.Attrs.Float("momentum")
		b, c := x.Shape[0], x.Shape[1]
		if b < 2 && !k.Inference {
			return nil, fmt.Errorf("training needs at least 2 rows per batch for the variance of a column, got %d; raise the batch size", b)
		}
		// Per column: the shift and scale y = (x - shift) * scale * gamma + beta.
		shift, scale := make([]float64, c), make([]float64, c)
		return func(Runtime) error {
			if k.Inference {
				for j := range c {
					shift[j], scale[j] = float64(runMean.F[j]), 1/math.Sqrt(float64(runVar.F[j])+eps)
				}
				copy(meanNext.F, runMean.F)
				copy(varNext.F, runVar.F)
			} else {
				clear(shift)
				for r := 0; r < b; r++ {
					for j, v := range x.F[r*c : (r+1)*c] {
						shift[j] += float64(v)
					}
				}
				for j := range shift {
					shift[j] /= float64(b)
				}
				clear(scale)
				for r := 0; r < b; r++ {
					for j, v := range x.F[r*c : (r+1)*c] {
						d := float64(v) - shift[j]
						scale[j] += d * d
					}
				}
				for j := range scale {
					q := scale[j] // the sum of squared deviations
					meanNext.F[j] = float32((1-m)*float64(runMean.F[j]) + m*shift[j])
					varNext.F[j] = float32((1-m)*float64(runVar.F[j]) + m*q/float64(b-1))
					scale[j] = 1 / math.Sqrt(q/float64(b)+eps)
				}
			}
			for r := 0; r < b; r++ {
				xr, yr := x.F[r*c:(r+1)*c], y.F[r*c:(r+1)*c]
				for j, v := range xr {
					yr[j] = gamma.F[j]*float32((float64(v)-shift[j])*scale[j]) + beta.F[j]
				}
			}
			return nil
		}, nil
	})
}
