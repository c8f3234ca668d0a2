package evaluate

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/tensor"
)

// head is what a model's loss says about its output: a softmax or
// sigmoid classifier's logits, or a regression's prediction.
type head struct {
	kind   string // "softmax", "sigmoid", "mse" or ""
	output string // logits, or the prediction
	loss   *dsl.Op
}

func headOf(g *dsl.Graph) head {
	i, ok := g.Producers()[g.Train.Loss]
	if !ok {
		return head{}
	}
	op := g.Ops[i]
	switch op.Type {
	case "softmax_cross_entropy":
		return head{"softmax", op.Inputs[0], op}
	case "sigmoid_cross_entropy":
		return head{"sigmoid", op.Inputs[0], op}
	case "mse":
		return head{"mse", op.Inputs[0], op}
	}
	return head{loss: op}
}

// Output is one output of a prediction (`psgraph predict`'s columns,
// `psgraph serve`'s tensors): the values of a variable (Var) as computed,
// or, for a classifier, pred (the argmax of a softmax's logits, or 1
// where a sigmoid's probability is at least 0.5) or prob (the softmax or
// sigmoid probabilities).
type Output struct {
	Name  string // pred, prob, or the variable
	Var   string // the variable computed
	Width int    // values of Var per row
	kind  string // the model's head: "softmax", "sigmoid", "mse" or ""
	dtype tensor.DType
}

// PredictOutputs resolves the outputs named (nil: the model's default:
// pred and prob for a softmax classifier, prob for a sigmoid one, the
// prediction for mse), with the types of the model at batch rows. what
// names them in errors ("--outputs", "output"). An output must have one
// row per input row and may not depend on the label.
func PredictOutputs(g *dsl.Graph, names []string, batch int, what string) ([]Output, error) {
	if g.Train == nil {
		return nil, dsl.Errorf(dsl.Pos{File: g.File}, "the model has no train section, whose loss names its output")
	}
	h := headOf(g)
	if len(names) == 0 {
		switch h.kind {
		case "softmax":
			names = []string{"pred", "prob"}
		case "sigmoid":
			names = []string{"prob"}
		case "mse":
			names = []string{h.output}
		default:
			return nil, dsl.Errorf(h.loss.Pos, "predict cannot tell the model's output from its loss %q (op %s); name the variables to write with --outputs", g.Train.Loss, h.loss.Type)
		}
	}
	types, err := g.Infer(batch)
	if err != nil {
		return nil, err
	}
	label := ""
	if g.Data != nil && g.Data.Label != nil {
		label = g.Data.Label.Name
	}
	var outs []Output
	for _, n := range names {
		o := Output{Name: n, Var: n, kind: h.kind}
		if n == "pred" || n == "prob" {
			_, isVar := types[n]
			switch {
			case h.kind == "softmax" || h.kind == "sigmoid":
				o.Var = h.output
			case !isVar: // a regression's pred is its variable of that name, if it has one
				return nil, fmt.Errorf("%s %s needs a classifier: the loss %q must be softmax_cross_entropy or sigmoid_cross_entropy (it is %s); name the variables to write instead", what, n, g.Train.Loss, h.loss.Type)
			}
		}
		ty, ok := types[o.Var]
		if !ok {
			return nil, fmt.Errorf("%s %s: the model %s has no variable %q (pred and prob name a classifier's outputs)%s", what, n, g.File, o.Var, dsl.Suggest(o.Var, slices.Sorted(maps.Keys(types))))
		}
		if len(ty.Shape) == 0 || ty.Shape[0] != batch {
			return nil, fmt.Errorf("%s %s: %q is %v, not one row per input row; name a variable whose first dimension is the batch", what, n, o.Var, ty.Shape)
		}
		if label != "" && dependsOn(g, o.Var, label) {
			return nil, fmt.Errorf("%s %s: %q depends on the label %q; a prediction computes what needs only the inputs (e.g. the logits)", what, n, o.Var, label)
		}
		o.Width, o.dtype = ty.Shape.Numel()/batch, ty.DType
		outs = append(outs, o)
	}
	return outs, nil
}

// Ints says whether the output's values are integers (IntRow: pred, or a
// variable of int32 ids or int64 keys) rather than float32 (FloatRow).
func (o Output) Ints() bool {
	return o.Name == "pred" && o.isClassifier() || o.dtype == tensor.I32 || o.dtype == tensor.I64
}

// DType is the type of the output's values: int64 for pred, else the
// variable's.
func (o Output) DType() tensor.DType {
	if o.Name == "pred" && o.isClassifier() {
		return tensor.I64
	}
	return o.dtype
}

func (o Output) isClassifier() bool { return o.kind == "softmax" || o.kind == "sigmoid" }

// Values is how many values the output has per row: one class for a
// softmax's pred, else the variable's width.
func (o Output) Values() int {
	if o.Name == "pred" && o.kind == "softmax" {
		return 1
	}
	return o.Width
}

// Columns names the output's values of a row, as predict's header does:
// the name, or name_0, name_1, ... for several.
func (o Output) Columns() []string {
	if o.Values() == 1 {
		return []string{o.Name}
	}
	cols := make([]string, o.Width)
	for j := range cols {
		cols[j] = o.Name + "_" + strconv.Itoa(j)
	}
	return cols
}

// IntRow writes row r of the output, computed in t (the scope's tensor of
// Var), into dst (Values() of them): pred's classes, or the variable's
// ids or keys.
func (o Output) IntRow(t *tensor.Tensor, r int, dst []int64) {
	w := o.Width
	switch t.DType {
	case tensor.I32:
		for j, v := range t.I[r*w : (r+1)*w] {
			dst[j] = int64(v)
		}
		return
	case tensor.I64:
		copy(dst, t.L[r*w:(r+1)*w])
		return
	}
	x := t.F[r*w : (r+1)*w]
	if o.kind == "softmax" { // pred: the argmax
		best := 0
		for j, v := range x {
			if v > x[best] {
				best = j
			}
		}
		dst[0] = int64(best)
		return
	}
	for j, v := range x { // a sigmoid's pred
		dst[j] = 0
		if v >= 0 {
			dst[j] = 1
		}
	}
}

// FloatRow writes row r of the output, computed in t (the scope's tensor
// of Var), into dst (Values() of them): prob's probabilities, computed in
// float64 and rounded once, or the variable's values.
func (o Output) FloatRow(t *tensor.Tensor, r int, dst []float32) {
	w := o.Width
	x := t.F[r*w : (r+1)*w]
	switch {
	case o.Name == "prob" && o.kind == "softmax":
		m := x[0]
		for _, v := range x {
			m = max(m, v)
		}
		var sum float64
		for _, v := range x {
			sum += math.Exp(float64(v - m))
		}
		for j, v := range x {
			dst[j] = float32(math.Exp(float64(v-m)) / sum)
		}
	case o.Name == "prob" && o.kind == "sigmoid":
		for j, v := range x {
			dst[j] = float32(1 / (1 + math.Exp(-float64(v))))
		}
	default:
		copy(dst, x)
	}
}

// rowWriter writes outputs' rows as CSV fields: float32 values in their
// shortest exact form, classes, int32 ids and int64 keys as decimal
// integers.
type rowWriter struct {
	ints   []int64
	floats []float32
}

func newRowWriter(outs []Output) *rowWriter {
	w := 0
	for _, o := range outs {
		w = max(w, o.Width)
	}
	return &rowWriter{ints: make([]int64, w), floats: make([]float32, w)}
}

// appendRow appends row r of o, computed in t, to b.
func (rw *rowWriter) appendRow(b []byte, o Output, t *tensor.Tensor, r int) []byte {
	n := o.Values()
	if o.Ints() {
		o.IntRow(t, r, rw.ints[:n])
		for j, v := range rw.ints[:n] {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, v, 10)
		}
		return b
	}
	o.FloatRow(t, r, rw.floats[:n])
	for j, v := range rw.floats[:n] {
		if j > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, float64(v), 'g', -1, 32)
	}
	return b
}

// dependsOn reports whether variable v is computed from variable from.
func dependsOn(g *dsl.Graph, v, from string) bool {
	return g.ComputedFrom(g.Producers(), v, func(x string) bool { return x == from })
}
