package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// Classification losses and metrics over logits [batch, classes] and
// integer labels [batch].

func init() {
	register(&Def{
		Name: "softmax_cross_entropy", Doc: "mean over the batch of -log softmax(logits)[label]",
		Inputs: []string{"logits", "label"}, Outputs: []string{"loss"},
		Infer: inferLogitsLabel(ir.F32),
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("softmax_cross_entropy_grad", []string{g.OutGrads[0], g.Inputs[0], g.Inputs[1]}, nil), ""}
		},
	}, &Def{
		Name: "softmax_cross_entropy_grad", Doc: "dlogits = dloss * (softmax(logits) - onehot(label)) / batch", Internal: true,
		Inputs: []string{"dloss", "logits", "label"}, Outputs: []string{"dlogits"},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			return []Type{{DType: ir.F32, Shape: in[1].Shape.Clone()}}, nil
		},
	}, &Def{
		Name: "accuracy", Doc: "fraction of rows whose largest logit is at the label (not differentiable)",
		Inputs: []string{"logits", "label"}, Outputs: []string{"acc"},
		Infer: inferLogitsLabel(ir.F32),
	})
}

func inferLogitsLabel(_ ir.DType) func([]Type, Attrs) ([]Type, error) {
	return func(in []Type, _ Attrs) ([]Type, error) {
		l, y := in[0], in[1]
		if l.DType != ir.F32 || len(l.Shape) != 2 {
			return nil, Errorf("logits must be float32 [batch, classes], got %v", l)
		}
		if y.DType != ir.I32 || len(y.Shape) != 1 {
			return nil, Errorf("label must be int32 [batch], got %v", y)
		}
		if y.Shape[0] != l.Shape[0] {
			return nil, Errorf("logits %v and label %v differ in batch size", l.Shape, y.Shape)
		}
		return []Type{F32()}, nil
	}
}
