package kernels

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/psgraph/psgraph/exec/tensor"
)

// auc: the ROC AUC of a batch of binary scores, a metric.

func init() {
	register("auc", func(k Args) (Kernel, error) {
		scores, label, out := k.In[0], k.In[1], k.Out[0]
		rs := make([]ranked, label.Shape[0]) // sorted in place every step: no allocation
		return func(Runtime) error {
			nan, err := rankRows(rs, scores, label)
			if err != nil {
				return err
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

// rankRows writes the first len(rs) rows of an auc op's inputs into rs:
// each row's score (for [batch, 2] softmax logits log(p1/p0), monotone in
// p1) and whether its label is 1; true if a score is NaN.
func rankRows(rs []ranked, scores, label *tensor.Tensor) (nan bool, err error) {
	two := len(scores.Shape) == 2 && scores.Shape[1] == 2
	for r := range rs {
		s := scores.F[r]
		if two {
			s = scores.F[2*r+1] - scores.F[2*r]
		}
		var y float32
		if label.I != nil {
			if id := label.I[r]; id != 0 && id != 1 {
				return false, fmt.Errorf("label %d in batch row %d is not 0 or 1: auc is a binary metric (for C classes, use accuracy)", id, r)
			}
			y = float32(label.I[r])
		} else if y = label.F[r]; y != 0 && y != 1 {
			return false, fmt.Errorf("label %v in batch row %d is not 0 or 1: auc is a binary metric (for C classes, use accuracy)", y, r)
		}
		nan = nan || math.IsNaN(float64(s))
		rs[r] = ranked{score: s, pos: y == 1}
	}
	return nan, nil
}

// AUCRows gathers the rows of several batches of an auc op's inputs, so
// that their AUC is computed over all of them at once: exactly the value
// the op computes over one batch holding every row (an evaluation in
// chunks; TestChunkedAUCIsExact). It keeps 8 bytes per row and allocates
// only to grow: gathering as many rows again allocates nothing.
type AUCRows struct {
	rs  []ranked
	nan bool
}

// Reset forgets the rows gathered.
func (a *AUCRows) Reset() { a.rs, a.nan = a.rs[:0], false }

// Add gathers the first n rows of scores and label, the inputs of an auc
// op (its errors: a label not 0 or 1).
func (a *AUCRows) Add(scores, label *tensor.Tensor, n int) error {
	k := len(a.rs)
	a.rs = slices.Grow(a.rs, n)[:k+n]
	nan, err := rankRows(a.rs[k:], scores, label)
	a.nan = a.nan || nan
	return err
}

// AUC is the AUC of the rows gathered: NaN when a score is NaN or the
// rows hold one class. It sorts the rows.
func (a *AUCRows) AUC() float64 {
	if a.nan {
		return math.NaN()
	}
	return mannWhitney(a.rs)
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
