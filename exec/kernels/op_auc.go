package kernels

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// auc: the ROC AUC of a batch of binary scores, a metric.

func init() {
	register("auc", func(k Args) (Kernel, error) {
		scores, label, out := k.In[0], k.In[1], k.Out[0]
		rows := label.Shape[0]
		two := len(scores.Shape) == 2 && scores.Shape[1] == 2
		rs := make([]ranked, rows) // sorted in place every step: no allocation
		return func(Runtime) error {
			nan := false
			for r := range rs {
				s := scores.F[r]
				if two { // softmax logits: log(p1/p0), monotone in p1
					s = scores.F[2*r+1] - scores.F[2*r]
				}
				var y float32
				if label.I != nil {
					if id := label.I[r]; id != 0 && id != 1 {
						return fmt.Errorf("label %d in batch row %d is not 0 or 1: auc is a binary metric (for C classes, use accuracy)", id, r)
					}
					y = float32(label.I[r])
				} else if y = label.F[r]; y != 0 && y != 1 {
					return fmt.Errorf("label %v in batch row %d is not 0 or 1: auc is a binary metric (for C classes, use accuracy)", y, r)
				}
				nan = nan || math.IsNaN(float64(s))
				rs[r] = ranked{score: s, pos: y == 1}
			}
			if nan {
				out.F[0] = float32(math.NaN())
				return nil
			}
			out.F[0] = float32(mannWhitney(rs))
			return nil
		}, nil
	})
}

// ranked is one row: its score and whether its label is 1.
type ranked struct {
	score float32
	pos   bool
}

func byScore(a, b ranked) int { return cmp.Compare(a.score, b.score) }

// mannWhitney sorts rs by score and returns the fraction of (positive,
// negative) pairs in which the positive scores higher, a tie counting
// 1/2; NaN without both classes.
func mannWhitney(rs []ranked) float64 {
	slices.SortFunc(rs, byScore)
	var below, pairs2, pos, neg int64 // negatives scored below the current group; 2 * U
	for i := 0; i < len(rs); {
		j, p, n := i, int64(0), int64(0)
		for ; j < len(rs) && rs[j].score == rs[i].score; j++ {
			if rs[j].pos {
				p++
			} else {
				n++
			}
		}
		pairs2 += p * (2*below + n)
		below += n
		pos, neg = pos+p, neg+n
		i = j
	}
	if pos == 0 || neg == 0 {
		return math.NaN()
	}
	return float64(pairs2) / (2 * float64(pos) * float64(neg))
}
