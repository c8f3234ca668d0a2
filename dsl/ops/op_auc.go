package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// auc: the ROC AUC of a batch of binary scores, a metric.

func init() {
	register(&Def{
		Name: "auc", Doc: "ROC AUC of the batch: the chance that a positive row scores above a negative one, ties counting 1/2 (NaN when the batch has one class; not differentiable)",
		Inputs: []string{"scores", "label"}, Outputs: []string{"auc"},
		Infer: inferAUC,
	})
}

func inferAUC(in []Type, _ Attrs) ([]Type, error) {
	s, y := in[0], in[1]
	ok := s.DType == ir.F32 && (len(s.Shape) == 1 || len(s.Shape) == 2 && (s.Shape[1] == 1 || s.Shape[1] == 2))
	if !ok {
		return nil, Errorf("scores must be float32 [batch], [batch, 1] (a probability or logit of class 1) or [batch, 2] (softmax logits), got %v", s)
	}
	// int32 class ids [batch], or float32 targets [batch] / [batch, 1]
	// (a data label with dtype: float32, as sigmoid_cross_entropy reads it)
	binaryFloat := y.DType == ir.F32 && (len(y.Shape) == 1 || len(y.Shape) == 2 && y.Shape[1] == 1)
	if !(y.DType == ir.I32 && len(y.Shape) == 1) && !binaryFloat {
		return nil, Errorf("label must be 0 and 1, as int32 [batch] or float32 [batch] or [batch, 1], got %v", y)
	}
	if y.Shape[0] != s.Shape[0] {
		return nil, Errorf("scores %v and label %v differ in batch size", s.Shape, y.Shape)
	}
	return []Type{F32()}, nil
}
