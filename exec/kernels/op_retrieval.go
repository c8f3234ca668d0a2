package kernels

import "fmt"

// Retrieval metrics: recall_at_k.

func init() {
	register("recall_at_k", func(k Args) (Kernel, error) {
		scores, label, out := k.In[0], k.In[1], k.Out[0]
		rows, c := scores.Shape[0], scores.Shape[1]
		top := k.Attrs.Int("k")
		return func(Runtime) error {
			hit := 0
			for r := 0; r < rows; r++ {
				y := int(label.I[r])
				if y < 0 || y >= c {
					return fmt.Errorf("label %d in batch row %d is outside [0, %d): recall_at_k needs the column of the row's positive among the scores' %d columns", y, r, c, c)
				}
				row := scores.F[r*c : (r+1)*c]
				if higherThan(row, row[y], top) < top {
					hit++
				}
			}
			out.F[0] = float32(hit) / float32(rows)
			return nil
		}, nil
	})
}

// higherThan counts the values of row above s, stopping at limit. A NaN s
// has every count at limit (no value is comparable: a miss), a NaN in the
// row is not above s.
func higherThan(row []float32, s float32, limit int) int {
	if s != s {
		return limit
	}
	n := 0
	for _, v := range row {
		if v > s {
			if n++; n == limit {
				return n
			}
		}
	}
	return n
}
