package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// dropout: a random op whose mask is a function of (seed, step, trainer,
// element), so a distributed job draws what local training draws.

func init() {
	attrs := []AttrSpec{
		{Name: "rate", Kind: AttrFloat, Required: true, Doc: "probability of zeroing an element, in [0, 1)"},
		{Name: "seed", Kind: AttrInt, Default: 0, Doc: "selects the masks"},
	}
	check := func(in []Type, a Attrs) ([]Type, error) {
		if r := a.Float("rate"); r < 0 || r >= 1 {
			return nil, Errorf("dropout rate must be in [0, 1), got %g", r)
		}
		return inferSameF32(in, a)
	}
	register(&Def{
		Name: "dropout", Doc: "y = x * mask / (1 - rate) in training, mask 0 with probability rate; y = x when evaluating or predicting",
		Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: attrs,
		Infer: check,
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("dropout_grad", []string{g.OutGrads[0]}, Attrs{"rate": g.Attrs.Float("rate"), "seed": g.Attrs.Int("seed")})}
		},
	}, &Def{
		Name: "dropout_grad", Doc: "dx = dy * mask / (1 - rate), the mask dropout drew this step", Internal: true,
		Inputs: []string{"dy"}, Outputs: []string{"dx"}, Attrs: attrs,
		Infer: check,
	})
	register(&Def{
		Name: "binary_accuracy", Doc: "fraction of rows whose score is above threshold exactly when the label is 1 (not differentiable)",
		Inputs: []string{"scores", "label"}, Outputs: []string{"acc"},
		Attrs: []AttrSpec{{Name: "threshold", Kind: AttrFloat, Default: 0.5, Doc: "0.5 for sigmoid probabilities, 0 for logits"}},
		Infer: func(in []Type, _ Attrs) ([]Type, error) {
			s, y := in[0], in[1]
			if s.DType != ir.F32 || !(len(s.Shape) == 1 || len(s.Shape) == 2 && s.Shape[1] == 1) {
				return nil, Errorf("scores must be float32 [batch] or [batch, 1], got %v", s)
			}
			if y.DType != ir.I32 && y.DType != ir.F32 || y.Shape.Numel() != s.Shape.Numel() || len(y.Shape) > 2 || y.Shape[0] != s.Shape[0] {
				return nil, Errorf("label must be int32 or float32 [batch] (or [batch, 1]) with one 0/1 label per score, got %v for scores %v", y, s)
			}
			return []Type{F32()}, nil
		},
	})
}
