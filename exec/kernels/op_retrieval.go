package kernels

import (
	"cmp"
	"fmt"
	"slices"
)

// Retrieval metrics: recall_at_k.

func init() {
	register("recall_at_k", func(k Args) (Kernel, error) {
		scores, label, out := k.In[0], k.In[1], k.Out[0]
		rows, c := scores.Shape[0], scores.Shape[1]
		top := k.Attrs.Int("k")
		var cands *candidates
		if len(k.In) == 3 {
			cands = newCandidates(k.In[2].I)
		}
		return func(Runtime) error {
			if cands != nil {
				cands.group()
			}
			hit := 0
			for r := 0; r < rows; r++ {
				y := int(label.I[r])
				if y < 0 || y >= c {
					return fmt.Errorf("label %d in batch row %d is outside [0, %d): recall_at_k needs the column of the row's positive among the scores' %d columns", y, r, c, c)
				}
				row := scores.F[r*c : (r+1)*c]
				if cands == nil {
					if atLeast(row, y, top) < top {
						hit++
					}
				} else if cands.atLeast(row, y, int32(r+1), top) < top {
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

// candidates groups the columns of the scores by their id: group[j] is
// the first column with column j's id. Its buffers are made once.
type candidates struct {
	ids    []int32
	group  func()
	first  []int32 // per column: the first column of its id
	mark   []int32 // per first column: the last row (from 1) that counted it
	sorted []idColumn
}

type idColumn struct{ id, col int32 }

func byIDThenColumn(a, b idColumn) int {
	if c := cmp.Compare(a.id, b.id); c != 0 {
		return c
	}
	return cmp.Compare(a.col, b.col)
}

func newCandidates(ids []int32) *candidates {
	n := len(ids)
	c := &candidates{ids: ids, first: make([]int32, n), mark: make([]int32, n), sorted: make([]idColumn, n)}
	c.group = func() {
		for j, id := range c.ids {
			c.sorted[j] = idColumn{id, int32(j)}
		}
		slices.SortFunc(c.sorted, byIDThenColumn)
		for i, p := range c.sorted {
			if i == 0 || p.id != c.sorted[i-1].id {
				c.first[p.col] = p.col
			} else {
				c.first[p.col] = c.first[c.sorted[i-1].col]
			}
		}
		clear(c.mark)
	}
	return c
}

// atLeast counts the distinct ids, other than column y's, of the columns
// of row scoring at least row[y], stopping at limit; r (from 1) marks the
// ids this row counted.
func (c *candidates) atLeast(row []float32, y int, r int32, limit int) int {
	s, pos := row[y], c.first[y]
	if s != s {
		return limit
	}
	n := 0
	for j, v := range row {
		if v >= s {
			if g := c.first[j]; g != pos && c.mark[g] != r {
				c.mark[g] = r
				if n++; n == limit {
					return n
				}
			}
		}
	}
	return n
}
