package evaluate

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/internal/atomicfile"
	"github.com/psgraph/psgraph/internal/csvrow"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
)

// PredictOptions configures Predict.
type PredictOptions struct {
	InitFrom string   // the parameters (required)
	Data     string   // the input rows: a file with the model's columns at their positions; a last label column may be absent
	Out      string   // the CSV file to write, one row per input row
	Outputs  []string // pred, prob, or variables of the model; nil: the model's default (softmax: pred, prob; sigmoid: prob; mse: the prediction)
	Keep     []string // columns of the data file written first on each row as they are (an id to join the predictions back to the rows)
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
	outs, err := PredictOutputs(g, opt.Outputs, chunk, "--outputs")
	if err != nil {
		return nil, err
	}
	spec, err := data.ForPrediction(g.Data, opt.Data) // new rows need no label
	if err != nil {
		return nil, err
	}
	file, err := data.OpenStreamScaled(spec, norm)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var kept *data.Kept
	if len(opt.Keep) > 0 {
		if kept, err = data.OpenKept(spec, opt.Keep); err != nil {
			return nil, err
		}
		defer kept.Close()
	}
	var targets, names []string
	for _, o := range outs {
		targets, names = append(targets, o.Var), append(names, o.Name)
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
	res.Columns = append(res.Columns, opt.Keep...)
	for _, o := range outs {
		res.Columns = append(res.Columns, o.Columns()...)
	}
	err = atomicfile.Write(opt.Out, func(f io.Writer) error {
		w := bufio.NewWriterSize(f, 1<<20)
		var head []byte
		for i, c := range res.Columns {
			if i > 0 {
				head = append(head, ',')
			}
			head = csvrow.AppendField(head, []byte(c), ',')
		}
		w.Write(append(head, '\n'))
		rows, err := writePredictions(ctx, file, kept, ch, outs, w)
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

// writePredictions runs the model over the file, chunk by chunk, and
// writes each row's kept fields (kept: nil for none) and outputs to w; it
// returns the rows written.
func writePredictions(ctx context.Context, file *data.FileStream, kept *data.Kept, ch *chunks, outs []Output, w *bufio.Writer) (int, error) {
	rows := 0
	var line []byte
	rw := newRowWriter(outs)
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
			if kept != nil {
				vals, err := kept.Next()
				if err != nil {
					return err
				}
				if vals == nil {
					return fmt.Errorf("the kept columns ended before row %d: %w", rows+r+1, errFileChanged)
				}
				for _, v := range vals {
					line = csvrow.AppendField(line, v, ',')
					line = append(line, ',')
				}
			}
			for i, o := range outs {
				if i > 0 {
					line = append(line, ',')
				}
				line = rw.appendRow(line, o, p.Scope[o.Var], r)
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
