package kernels

import (
	"fmt"
	"math"

	"github.com/psgraph/psgraph/exec/blas"
)

// Classification losses and metrics over logits [batch, classes] and
// integer labels [batch].

func init() {
	register("softmax_cross_entropy", func(k Args) (Kernel, error) {
		logits, label, loss := k.In[0], k.In[1], k.Out[0]
		rows, c := logits.Shape[0], logits.Shape[1]
		scratch := make([]float32, c)
		return func(Runtime) error {
			var total float64
			for r := 0; r < rows; r++ {
				row := logits.F[r*c : (r+1)*c]
				y := int(label.I[r])
				if y < 0 || y >= c {
					return labelRange(r, y, c)
				}
				mx, lse := logSumExp(row, scratch)
				total += lse + float64(mx) - float64(row[y])
			}
			loss.F[0] = float32(total / float64(rows))
			return nil
		}, nil
	})
	register("softmax_cross_entropy_grad", func(k Args) (Kernel, error) {
		dloss, logits, label, dx := k.In[0], k.In[1], k.In[2], k.Out[0]
		rows, c := logits.Shape[0], logits.Shape[1]
		return func(Runtime) error {
			s := dloss.F[0] / float32(rows)
			for r := 0; r < rows; r++ {
				row, out := logits.F[r*c:(r+1)*c], dx.F[r*c:(r+1)*c]
				y := int(label.I[r])
				if y < 0 || y >= c {
					return labelRange(r, y, c)
				}
				softmaxRow(row, out)
				out[y] -= 1
				blas.Scale(s, negZero, out, out) // s times out, exactly
			}
			return nil
		}, nil
	})
	register("accuracy", func(k Args) (Kernel, error) {
		logits, label, acc := k.In[0], k.In[1], k.Out[0]
		rows, c := logits.Shape[0], logits.Shape[1]
		return func(Runtime) error {
			hit := 0
			for r := 0; r < rows; r++ {
				row := logits.F[r*c : (r+1)*c]
				best := 0
				for j, v := range row {
					if v > row[best] {
						best = j
					}
				}
				if best == int(label.I[r]) {
					hit++
				}
			}
			acc.F[0] = float32(hit) / float32(rows)
			return nil
		}, nil
	})
}

func labelRange(row, y, c int) error {
	return fmt.Errorf("label %d in batch row %d is outside [0, %d): the data has more classes than the logits", y, row, c)
}

// logSumExp returns the row max and log(sum(exp(row - max))); scratch
// holds the exponentials, len(row) of them.
func logSumExp(row, scratch []float32) (float32, float64) {
	mx := rowMax(row)
	return mx, math.Log(float64(blas.ExpSub(row, mx, scratch)))
}

func rowMax(row []float32) float32 {
	mx := row[0]
	for _, v := range row {
		if v > mx {
			mx = v
		}
	}
	return mx
}

// softmaxRow writes softmax(row) into out.
func softmaxRow(row, out []float32) {
	s := blas.ExpSub(row, rowMax(row), out)
	blas.Scale(1/s, negZero, out, out)
}

// negZero as Scale's b makes it a product alone: a*x + (-0) is a*x,
// -0 included (a +0 would turn a -0 product into +0).
var negZero = float32(math.Copysign(0, -1))
