package ops

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/psgraph/psgraph/dsl/ir"
)

// auc: the ROC AUC of a batch of binary scores, a metric.

func init() {
	register(&Def{
		Name: "auc", Doc: "ROC AUC of the batch: the chance that a positive row scores above a negative one, ties counting 1/2 (NaN when the batch has one class; not differentiable)",
		Inputs: []string{"scores", "label"}, Outputs: []string{"auc"},
		Infer: inferAUC,
		Kernel: func(k KernelArgs) (Kernel, error) {
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
					y := label.I[r]
					if y != 0 && y != 1 {
						return fmt.Errorf("label %d in batch row %d is not 0 or 1: auc is a binary metric (for C classes, use accuracy)", y, r)
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
		},
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

func inferAUC(in []Type, _ Attrs) ([]Type, error) {
	s, y := in[0], in[1]
	ok := s.DType == ir.F32 && (len(s.Shape) == 1 || len(s.Shape) == 2 && (s.Shape[1] == 1 || s.Shape[1] == 2))
	if !ok {
		return nil, Errorf("scores must be float32 [batch], [batch, 1] (a probability or logit of class 1) or [batch, 2] (softmax logits), got %v", s)
	}
	if y.DType != ir.I32 || len(y.Shape) != 1 {
		return nil, Errorf("label must be int32 [batch] of 0 and 1, got %v", y)
	}
	if y.Shape[0] != s.Shape[0] {
		return nil, Errorf("scores %v and label %v differ in batch size", s.Shape, y.Shape)
	}
	return []Type{F32()}, nil
}
