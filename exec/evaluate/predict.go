package evaluate

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/internal/atomicfile"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/tensor"
)

// PredictOptions configures Predict.
type PredictOptions struct {
	InitFrom string   // the parameters (required)
	Data     string   // the input rows: a file with the model's columns at their positions; a last label column may be absent
	Out      string   // the CSV file to write, one row per input row
	Outputs  []string // pred, prob, or variables of the model; nil: the model's default (softmax: pred, prob; sigmoid: prob; mse: the prediction)
	Chunk    int      // rows computed at once (0: EvalChunk)
	Log      zerolog.Logger
}

// PredictResult says what Predict wrote.
type PredictResult struct {
	Out     string
	Rows    int
	Columns []string // the header's, in order
}

// shownColumns is how many column names the JSON summary lists: a DLRM's
// feature outputs have hundreds, which the file's header line holds.
const shownColumns = 8

// MarshalJSON writes out, rows, the number of columns and the names of
// the first few (all of them when there are at most shownColumns):
// {"out":"pred.csv","rows":1797,"columns":11,"first_columns":["pred","prob_0",...]}.
func (r *PredictResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Out          string   `json:"out"`
		Rows         int      `json:"rows"`
		Columns      int      `json:"columns"`
		FirstColumns []string `json:"first_columns"`
	}{r.Out, r.Rows, len(r.Columns), r.Columns[:min(len(r.Columns), shownColumns)]})
}

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

// output is one requested output: its columns come from a variable (v),
// raw, or as pred (argmax / threshold) or prob (softmax / sigmoid).
type output struct {
	name  string // pred, prob, or the variable
	v     string
	width int // values per row of v
}

// Predict runs the forward graph of a model with saved parameters over a
// data file, streaming it in chunks, and writes one CSV row per input row
// (a header line first). Features are normalized with the statistics saved
// with the parameters. pred is the argmax of a softmax classifier's logits
// (a sigmoid's: 1 where the probability is at least 0.5), prob its
// probabilities; any other name is a variable of the model, written as
// computed. An output may not depend on the label.
func Predict(ctx context.Context, g *dsl.Graph, opt PredictOptions) (*PredictResult, error) {
	if g.Train == nil || g.Data == nil {
		return nil, dsl.Errorf(dsl.Pos{File: g.File}, "predict needs the model's data section (its columns) and train section (its loss names the output)")
	}
	params, norm, err := modelfile.LoadModel(g, opt.InitFrom, opt.Log)
	if err != nil {
		return nil, err
	}
	chunk := opt.Chunk
	if chunk <= 0 {
		chunk = EvalChunk
	}
	h := headOf(g)
	outs, err := predictOutputs(g, h, opt.Outputs, chunk)
	if err != nil {
		return nil, err
	}
	spec, err := data.Other(g.Data, opt.Data)
	if err != nil {
		return nil, err
	}
	spec.Label = nil // new rows need no label
	file, err := data.OpenStreamScaled(spec, norm)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var targets, names []string
	for _, o := range outs {
		targets, names = append(targets, o.v), append(names, o.name)
	}
	// The file is read once, in chunks, as the held-out evaluation reads
	// its file.
	ch, err := newChunks(chunk, func(batch int) (*program.Program, *program.Feeder, error) {
		p, err := program.Compile(g, program.CompileOptions{Batch: batch, Targets: targets, Shared: params, Workers: 1})
		if err != nil {
			return nil, nil, err
		}
		f := program.FeederOf(spec, p.Scope) // spec has no label
		if f.Empty() {
			p.Close()
			return nil, nil, fmt.Errorf("--outputs %s do not depend on the data; name outputs computed from the inputs", strings.Join(names, ","))
		}
		return p, f, nil
	})
	defer ch.close()
	if err != nil {
		return nil, err
	}
	res := &PredictResult{Out: opt.Out}
	for _, o := range outs {
		res.Columns = append(res.Columns, o.columns(h.kind)...)
	}
	err = atomicfile.Write(opt.Out, func(f io.Writer) error {
		w := bufio.NewWriterSize(f, 1<<20)
		w.WriteString(strings.Join(res.Columns, ",") + "\n")
		rows, err := writePredictions(ctx, file, ch, outs, h.kind, w)
		res.Rows = rows
		if err == nil {
			err = w.Flush()
		}
		return err
	})
	if err != nil {
		if errors.Is(err, errFileChanged) {
			err = fmt.Errorf("%s: %w", opt.Data, err)
		}
		return nil, fmt.Errorf("predicting %s into %s: %w", opt.Data, opt.Out, err)
	}
	return res, nil
}

// predictOutputs resolves the outputs to write: names, or the model's
// default (softmax: pred, prob; sigmoid: prob; mse: the prediction).
func predictOutputs(g *dsl.Graph, h head, names []string, chunk int) ([]output, error) {
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
	types, err := g.Infer(chunk)
	if err != nil {
		return nil, err
	}
	label := ""
	if g.Data.Label != nil {
		label = g.Data.Label.Name
	}
	var outs []output
	for _, n := range names {
		o := output{name: n, v: n}
		if n == "pred" || n == "prob" {
			if h.kind != "softmax" && h.kind != "sigmoid" {
				return nil, fmt.Errorf("--outputs %s needs a classifier: the loss %q must be softmax_cross_entropy or sigmoid_cross_entropy (it is %s); name the variables to write instead", n, g.Train.Loss, h.loss.Type)
			}
			o.v = h.output
		}
		ty, ok := types[o.v]
		if !ok {
			return nil, fmt.Errorf("--outputs %s: the model %s has no variable %q (pred and prob name a classifier's outputs)%s", n, g.File, o.v, dsl.Suggest(o.v, slices.Sorted(maps.Keys(types))))
		}
		if len(ty.Shape) == 0 || ty.Shape[0] != chunk {
			return nil, fmt.Errorf("--outputs %s: %q is %v, not one row per input row; name a variable whose first dimension is the batch", n, o.v, ty.Shape)
		}
		if label != "" && dependsOn(g, o.v, label) {
			return nil, fmt.Errorf("--outputs %s: %q depends on the label %q; predict computes what needs only the inputs (e.g. the logits)", n, o.v, label)
		}
		o.width = ty.Shape.Numel() / chunk
		outs = append(outs, o)
	}
	return outs, nil
}

// writePredictions runs the model over the file, chunk by chunk, and
// writes each row's outputs to w; it returns the rows written.
func writePredictions(ctx context.Context, file *data.FileStream, ch *chunks, outs []output, kind string, w *bufio.Writer) (int, error) {
	rows := 0
	var line []byte
	rt := &program.Runtime{Ctx: ctx}
	ff := ch.ffull
	err := file.Epoch(ff.Dst, func(n int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		p, err := ch.program(n)
		if err != nil {
			return err
		}
		if err := p.Run(rt); err != nil {
			return err
		}
		for r := 0; r < n; r++ {
			line = line[:0]
			for i, o := range outs {
				if i > 0 {
					line = append(line, ',')
				}
				line = o.appendRow(line, p.Scope[o.v], r, kind)
			}
			line = append(line, '\n')
			if _, err := w.Write(line); err != nil {
				return err
			}
		}
		rows += n
		return nil
	})
	return rows, err
}

func (o output) columns(kind string) []string {
	if o.name == "pred" && kind == "softmax" {
		return []string{"pred"}
	}
	if o.width == 1 {
		return []string{o.name}
	}
	cols := make([]string, o.width)
	for j := range cols {
		cols[j] = o.name + "_" + strconv.Itoa(j)
	}
	return cols
}

// appendRow writes row r of t as o's CSV fields: float32 values in their
// shortest exact form, int32 ids and int64 keys as decimal integers.
func (o output) appendRow(b []byte, t *tensor.Tensor, r int, kind string) []byte {
	w := o.width
	switch t.DType {
	case tensor.I32:
		for j, v := range t.I[r*w : (r+1)*w] {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(v), 10)
		}
		return b
	case tensor.I64: // 64-bit keys, every digit
		for j, v := range t.L[r*w : (r+1)*w] {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, v, 10)
		}
		return b
	}
	x := t.F[r*w : (r+1)*w]
	switch {
	case o.name == "pred" && kind == "softmax":
		best := 0
		for j, v := range x {
			if v > x[best] {
				best = j
			}
		}
		return strconv.AppendInt(b, int64(best), 10)
	case o.name == "prob" && kind == "softmax":
		m := x[0]
		for _, v := range x {
			m = max(m, v)
		}
		var sum float64
		for _, v := range x {
			sum += math.Exp(float64(v - m))
		}
		for j, v := range x {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendFloat(b, float64(float32(math.Exp(float64(v-m))/sum)), 'g', -1, 32)
		}
		return b
	}
	for j, v := range x {
		if j > 0 {
			b = append(b, ',')
		}
		switch o.name {
		case "prob": // sigmoid
			p := 1 / (1 + math.Exp(-float64(v)))
			b = strconv.AppendFloat(b, float64(float32(p)), 'g', -1, 32)
		case "pred": // sigmoid
			if v >= 0 {
				b = append(b, '1')
			} else {
				b = append(b, '0')
			}
		default:
			b = strconv.AppendFloat(b, float64(v), 'g', -1, 32)
		}
	}
	return b
}

// dependsOn reports whether variable v is computed from variable from.
func dependsOn(g *dsl.Graph, v, from string) bool {
	prod := g.Producers()
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(x string) bool {
		if x == from {
			return true
		}
		if seen[x] {
			return false
		}
		seen[x] = true
		i, ok := prod[x]
		if !ok {
			return false
		}
		for _, in := range g.Ops[i].Inputs {
			if walk(in) {
				return true
			}
		}
		return false
	}
	return walk(v)
}
