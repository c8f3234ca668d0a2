package kernels

import (
	"github.com/psgraph/psgraph/exec/blas"
	"github.com/psgraph/psgraph/exec/tensor"
)

// softmax over the last axis and its gradient helper.

func init() {
	register("softmax", func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		c := lastDim(x.Shape)
		var e expRows
		return func(Runtime) error {
			n := len(y.F) / c * c
			e.run(x.F[:n], y.F[:n], c)
			for r := range n / c {
				scaleRow(y.F[r*c:(r+1)*c], 1/e.sum[r])
			}
			return nil
		}, nil
	})
	register("softmax_grad", func(k Args) (Kernel, error) {
		dy, y, dx := k.In[0], k.In[1], k.Out[0]
		c := lastDim(y.Shape)
		return func(Runtime) error {
			for r := 0; r+c <= len(dx.F); r += c {
				dyr, yr, dxr := dy.F[r:r+c], y.F[r:r+c], dx.F[r:r+c]
				var dot float32
				for j, v := range yr {
					dot += dyr[j] * v
				}
				blas.Scale(1, -dot, dyr, dxr) // dy - dot
				blas.Mul(yr, dxr, dxr)
			}
			return nil
		}, nil
	})
}

// lastDim is the size of the last axis (1 for a scalar).
func lastDim(s tensor.Shape) int {
	if len(s) == 0 {
		return 1
	}
	return s[len(s)-1]
}
