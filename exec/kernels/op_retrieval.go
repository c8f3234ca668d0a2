package kernels

import (
	"fmt"
	"slices"
)

// Retrieval metrics: recall_at_k.

func init() {
	register("recall_at_k", func(k Args) (Kernel, error) {
		scores, label, out := k.In[0], k.In[1], k.Out[0]
		rows, c := scores.Shape[0], scores.Shape[1]
		top := k.Attrs.Int("k")
		var ids, seen []int32
		if len(k.In) == 3 {
			ids, seen = k.In[2].I, make([]int32, 0, c) // seen: scratch, no allocation per step
		}
		return func(Runtime) error {
			hit := 0
			for r := 0; r < rows; r++ {
				y := int(label.I[r])
				if y < 0 || y >= c {
					return fmt.Errorf("label %d in batch row %d is outside [0, %d): recall_at_k needs the column of the row's positive among the scores' %d columns", y, r, c, c)
				}
				row := scores.F[r*c : (r+1)*c]
				if ids == nil {
					if atLeast(row, y, top) < top {
						hit++
					}
				} else if distinctAtLeast(row, y, ids, seen, top) < top {
					hit++
				}
			}
			out.F[0] = float32(hit) / float32(rows)
			return nil
		}, nil
	})
}

// atLeast counts the columns of row other than y scoring at least row[y],
// stopping at limit. A NaN at y counts limit (a miss); a NaN elsewhere
// is not at least row[y].
func atLeast(row []float32, y, limit int) int {
	s := row[y]
	if s != s {
		return limit
	}
	n := 0
	for j, v := range row {
		if v >= s && j != y {
			if n++; n == limit {
				return n
			}
		}
	}
	return n
}

// distinctAtLeast counts the distinct ids, other than column y's, of the
// columns of row scoring at least row[y], stopping at limit; seen is
// scratch of row's length.
func distinctAtLeast(row []float32, y int, ids, seen []int32, limit int) int {
	s, pos := row[y], ids[y]
	if s != s {
		return limit
	}
	seen = seen[:0]
	for j, v := range row {
		if v >= s && ids[j] != pos {
			seen = append(seen, ids[j])
		}
	}
	if len(seen) < limit {
		return len(seen)
	}
	slices.Sort(seen)
	n := 0
	for i, id := range seen {
		if i == 0 || id != seen[i-1] {
			if n++; n == limit {
				return n
			}
		}
	}
	return n
}
