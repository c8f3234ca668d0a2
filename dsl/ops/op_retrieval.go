package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// Retrieval metrics: recall_at_k ranks each row's positive column among
// the row's scores, the measure of a two-tower model scored against
// in-batch candidates.

func init() {
	register(&Def{
		Name: "recall_at_k", Doc: "fraction of rows whose label column is among the k highest scores of the row: fewer than k other candidates score at least as high (with candidate ids, the columns of one id are one candidate, and those of the label column's id are the positive itself); not differentiable",
		Inputs: []string{"scores", "label", "ids"}, Outputs: []string{"recall"}, MinInputs: 2, MaxInputs: 3,
		Attrs: []AttrSpec{{Name: "k", Kind: AttrInt, Required: true, Doc: "how many of the highest-scoring candidates count as retrieved, 1 or more"}},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if k := a.Int("k"); k < 1 {
				return nil, Errorf("k is %d; it must be 1 or more (the number of top-scoring candidates that count as retrieved)", k)
			}
			s, y := in[0], in[1]
			if s.DType != ir.F32 || len(s.Shape) != 2 {
				return nil, Errorf("scores must be float32 [batch, candidates], got %v", s)
			}
			if y.DType != ir.I32 || len(y.Shape) != 1 {
				return nil, Errorf("label must be int32 [batch], the column of each row's positive (arange_like of the scores for in-batch negatives), got %v", y)
			}
			if y.Shape[0] != s.Shape[0] {
				return nil, Errorf("scores %v and label %v differ in batch size", s.Shape, y.Shape)
			}
			if len(in) == 3 {
				ids := in[2]
				if ids.DType != ir.I32 || ids.Shape.Numel() != s.Shape[1] || len(ids.Shape) > 2 || len(ids.Shape) == 2 && ids.Shape[1] != 1 {
					return nil, Errorf("ids must be int32 [candidates] or [candidates, 1], one id per column of the scores %v (the item of each column), got %v", s.Shape, ids)
				}
			}
			return []Type{F32()}, nil
		},
	})
}
