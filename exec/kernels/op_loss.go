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
		var e expRows
		return func(Runtime) error {
			for r := 0; r < rows; r++ {
				if y := int(label.I[r]); y < 0 || y >= c {
					return labelRange(r, y, c)
				}
			}
			e.run(logits.F[:rows*c], nil, c)
			var total float64
			for r := 0; r < rows; r++ {
				// log(sum(exp(row - max))) + max - row[y]
				total += math.Log(float64(e.sum[r])) + float64(e.max[r]) - float64(logits.F[r*c+int(label.I[r])])
			}
			loss.F[0] = float32(total / float64(rows))
			return nil
		}, nil
	})
	register("softmax_cross_entropy_grad", func(k Args) (Kernel, error) {
		dloss, logits, label, dx := k.In[0], k.In[1], k.In[2], k.Out[0]
		rows, c := logits.Shape[0], logits.Shape[1]
		var e expRows
		return func(Runtime) error {
			for r := 0; r < rows; r++ {
				if y := int(label.I[r]); y < 0 || y >= c {
					return labelRange(r, y, c)
				}
			}
			s := dloss.F[0] / float32(rows)
			out := dx.F[:rows*c]
			e.run(logits.F[:rows*c], out, c)
			for r := 0; r < rows; r++ {
				row := out[r*c : (r+1)*c]
				scaleRow(row, 1/e.sum[r]) // softmax(row)
				row[label.I[r]] -= 1
				scaleRow(row, s) // s times out, exactly
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

// expRows computes, for every row of c values of x, its largest value,
// exp(x - largest) (blas.ExpSub's) and their sum: a softmax's numerators
// and denominator. Rows narrower than the vector width (a classifier's 10
// classes) are shifted by their maxima first and go through one ExpSub
// call together, so that its vector body takes them 16 values at a time;
// each row's sum then adds its values in order, as ExpSub does past its
// vector part. Its buffers grow to the largest batch and stay.
type expRows struct {
	max, sum []float32
	scratch  []float32 // the exponentials when the caller keeps none
}

// run fills e.max and e.sum for x's rows and the exponentials into out
// (nil: e.scratch); out may be x.
func (e *expRows) run(x, out []float32, c int) {
	rows := len(x) / c
	if cap(e.max) < rows {
		e.max, e.sum = make([]float32, rows), make([]float32, rows)
	}
	e.max, e.sum = e.max[:rows], e.sum[:rows]
	if out == nil {
		if cap(e.scratch) < len(x) {
			e.scratch = make([]float32, len(x))
		}
		out = e.scratch[:len(x)]
	}
	if c >= 16 {
		for r := range rows {
			row := x[r*c : (r+1)*c]
			e.max[r] = rowMax(row)
			e.sum[r] = blas.ExpSub(row, e.max[r], out[r*c:(r+1)*c])
		}
		return
	}
	for r := range rows {
		row, o := x[r*c:(r+1)*c], out[r*c:(r+1)*c]
		m := rowMax(row)
		e.max[r] = m
		for j, v := range row {
			o[j] = v - m // ExpSub's own first step: the same rounding
		}
	}
	blas.ExpSub(out, 0, out)
	for r := range rows {
		var s float32
		for _, v := range out[r*c : (r+1)*c] {
			s += v
		}
		e.sum[r] = s
	}
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

// scaleRow multiplies row by a in place: a*x exactly (blas.Scale with
// -0 as its b, through the vector body when the row is wide enough).
func scaleRow(row []float32, a float32) {
	if len(row) >= 8 {
		blas.Scale(a, negZero, row, row)
		return
	}
	for j := range row {
		row[j] *= a
	}
}

// negZero as Scale's b makes it a product alone: a*x + (-0) is a*x,
// -0 included (a +0 would turn a -0 product into +0).
var negZero = float32(math.Copysign(0, -1))
