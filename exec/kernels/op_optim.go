package kernels

import (
	"math"

	"github.com/psgraph/psgraph/exec/blas"
	"github.com/psgraph/psgraph/exec/tensor"
)

// pow, row_mean and row_mean_grad: the ops the built-in optimizers need
// beyond element-wise arithmetic (FTRL, row-wise adagrad).

func init() {
	register("pow", func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		p := k.Attrs.Float("exponent")
		var f func(x, y []float32)
		switch p {
		case 1:
			f = func(x, y []float32) { copy(y, x) }
		case 2:
			f = func(x, y []float32) { blas.Mul(x, x, y) }
		case 0.5: // sqrt's kernel, so that pow(x, 0.5) is sqrt(x) bit for bit
			f = blas.Sqrt
		case -0.5:
			f = func(x, y []float32) {
				for i, v := range x[:len(y)] {
					y[i] = float32(1 / math.Sqrt(float64(v)))
				}
			}
		default:
			f = func(x, y []float32) {
				for i, v := range x[:len(y)] {
					y[i] = float32(math.Pow(float64(v), p))
				}
			}
		}
		return func(Runtime) error { f(x.F, y.F); return nil }, nil
	})
	register("row_mean", func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		w := rowWidth(x)
		inv := 1 / float64(w)
		return func(Runtime) error {
			if y.Rows != nil {
				y.Fit() // the rows x holds
			}
			xf, yf := x.F, y.F
			for i := range yf {
				var s float64
				for _, v := range xf[i*w : (i+1)*w] {
					s += float64(v)
				}
				yf[i] = float32(s * inv)
			}
			return nil
		}, nil
	})
	register("row_mean_grad", func(k Args) (Kernel, error) {
		dy, dx := k.In[0], k.Out[0]
		w := rowWidth(dx)
		inv := 1 / float32(w)
		return func(Runtime) error {
			df := dx.F
			for i, v := range dy.F {
				g := v * inv
				for j := range df[i*w : (i+1)*w] {
					df[i*w+j] = g
				}
			}
			return nil
		}, nil
	})
}

// rowWidth is the number of elements of one row (dim 0) of t: 1 for a
// scalar or a vector.
func rowWidth(t *tensor.Tensor) int {
	if len(t.Shape) <= 1 {
		return 1
	}
	return t.RowWidth()
}
