package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// Element-wise losses, each a scalar mean over all elements:
// sigmoid_cross_entropy (binary cross-entropy with logits) and mse, and
// the regression metrics mae and rmse.

func init() {
	register(&Def{
		Name: "sigmoid_cross_entropy", Doc: "mean over all elements of -(labels·log σ(logits) + (1-labels)·log(1-σ(logits))), computed stably as max(x,0) - x·z + log(1+exp(-|x|))",
		Inputs: []string{"logits", "labels"}, Outputs: []string{"loss"},
		Infer: inferPairLoss("logits", "labels"),
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("sigmoid_cross_entropy_grad", []string{g.OutGrads[0], g.Inputs[0], g.Inputs[1]}, nil), ""}
		},
	}, &Def{
		Name: "sigmoid_cross_entropy_grad", Doc: "dlogits = dloss * (σ(logits) - labels) / numel", Internal: true,
		Inputs: []string{"dloss", "logits", "labels"}, Outputs: []string{"dlogits"},
		Infer: inferPairLossGrad,
	}, &Def{
		Name: "mse", Doc: "mean over all elements of (pred - target)²",
		Inputs: []string{"pred", "target"}, Outputs: []string{"loss"},
		Infer: inferPairLoss("pred", "target"),
		Grad: func(b GradBuilder, g GradArgs) []string {
			d := b.Emit("mse_grad", []string{g.OutGrads[0], g.Inputs[0], g.Inputs[1]}, nil)
			out := []string{"", ""}
			if g.Need[0] {
				out[0] = d
			}
			if g.Need[1] {
				out[1] = b.Emit("scale", []string{d}, Attrs{"factor": -1.0})
			}
			return out
		},
	}, &Def{
		Name: "mae", Doc: "mean over all elements of |pred - target| (a metric; not differentiable)",
		Inputs: []string{"pred", "target"}, Outputs: []string{"mae"},
		Infer: inferPairLoss("pred", "target"),
	}, &Def{
		Name: "rmse", Doc: "square root of the mean over all elements of (pred - target)² (a metric; not differentiable); an evaluation's is over all its rows, not a mean of chunks'",
		Inputs: []string{"pred", "target"}, Outputs: []string{"rmse"},
		Infer: inferPairLoss("pred", "target"),
	}, &Def{
		Name: "mse_grad", Doc: "dpred = dloss * 2 (pred - target) / numel", Internal: true,
		Inputs: []string{"dloss", "pred", "target"}, Outputs: []string{"dpred"},
		Infer: inferPairLossGrad,
	})
}

// inferPairLoss checks two float32 operands of one shape and returns a scalar.
func inferPairLoss(a, b string) func([]Type, Attrs) ([]Type, error) {
	return func(in []Type, _ Attrs) ([]Type, error) {
		if in[0].DType != ir.F32 || in[1].DType != ir.F32 {
			return nil, Errorf("%s and %s must be float32, got %v and %v", a, b, in[0], in[1])
		}
		if !in[0].Shape.Equal(in[1].Shape) {
			return nil, Errorf("%s %v and %s %v must have the same shape", a, in[0].Shape, b, in[1].Shape)
		}
		return []Type{F32()}, nil
	}
}

// inferPairLossGrad checks (dloss scalar, x, y same shape) and returns x's type.
func inferPairLossGrad(in []Type, _ Attrs) ([]Type, error) {
	if in[0].Shape.Numel() != 1 {
		return nil, Errorf("dloss must be a scalar, got %v", in[0])
	}
	if !in[1].Shape.Equal(in[2].Shape) {
		return nil, Errorf("operands %v and %v must have the same shape", in[1].Shape, in[2].Shape)
	}
	return []Type{{DType: ir.F32, Shape: in[1].Shape.Clone()}}, nil
}
