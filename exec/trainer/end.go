package trainer

import (
	"fmt"
	"math"
	"time"

	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
)

// end finishes the run: a trainer receives the final parameters; the
// parameters are saved (trainer 0 of a job with tables pulls every table
// into the file) and the held-out data evaluated; a trainer then
// finishes with its pservers (which serve its pulls until then); the
// summary gets the loss and metrics over the data set.
func (r *run) end(elapsed float64) (*Summary, error) {
	g, opt := r.g, r.opt
	reportTruncated(opt.Log, r.set, r.file)
	params, names := program.Scope{}, g.ModelVars()
	for _, name := range names {
		params[name] = r.prog.Scope[name]
	}
	if opt.Comm != nil && len(opt.Params) > 0 {
		if err := r.receiveFinal(params); err != nil {
			return nil, err
		}
	}
	if opt.Comm != nil {
		names = append(names, opt.Params...)
	}
	if opt.Save != "" {
		names, local, err := tableEntries(r.prog, names)
		if err != nil {
			return nil, err
		}
		if err := r.save(names, params, local); err != nil {
			return nil, err
		}
		opt.Log.Info().Str("file", opt.Save).Msg("saved parameters")
	}
	sum := &Summary{Role: opt.Role, Steps: r.steps, Seconds: elapsed, StepsPerS: float64(r.steps-r.first) / elapsed, Metrics: map[string]float64{}, order: g.Train.Metrics,
		Tables: tableStats(r.prog)}
	if r.ev != nil {
		if r.pulls != nil { // the rows of the job's end
			r.pulls.at, r.pulls.final = int64(r.steps), true
		}
		vals, err := logEval(r.ctx, r.ev, r.steps, g, opt, r.metrics)
		if err != nil {
			return nil, err
		}
		sum.EvalRows = r.ev.Rows
		sum.Note = r.batchNote(r.ev)
		sum.Eval = map[string]float64{"eval_loss": vals[0]}
		for i, m := range g.Train.Metrics {
			sum.Eval["eval_"+m] = vals[i+1]
		}
	}
	if opt.Comm != nil {
		if err := r.finish(sum); err != nil {
			return nil, err
		}
	}
	if r.on != nil {
		r.on.fillSummary(sum, r.on.win.names)
		return sum, nil
	}
	if r.tail != nil {
		vals := r.tail.values()
		sum.Loss = vals[0]
		for i, m := range g.Train.Metrics {
			sum.Metrics[m] = vals[i+1]
		}
		return sum, nil
	}
	// The pass over the whole training data (--final-pass).
	ev, err := evaluate.NewEvaluatorTables(g, r.set, r.file, params, r.prog.Tables, nil, max(r.batch, evaluate.EvalChunk))
	if err != nil {
		return nil, err
	}
	defer ev.Close()
	ev.ReportTo(r.progress(), "evaluating the training data")
	vals, err := ev.Run(r.ctx)
	if err != nil {
		return nil, err
	}
	if sum.Note == "" {
		sum.Note = r.batchNote(ev)
	}
	sum.Loss = vals[0]
	for i, m := range g.Train.Metrics {
		sum.Metrics[m] = vals[i+1]
	}
	return sum, nil
}

// batchNote is evaluate.BatchNote of an evaluation by ev, logged as a
// warning when there is one.
func (r *run) batchNote(ev *evaluate.Evaluator) string {
	note := evaluate.BatchNote(r.g, ev.Chunk(), r.batch)
	if note != "" {
		r.opt.Log.Warn().Msg(note)
	}
	return note
}

// finish tells the pservers this trainer is done, waits until they are,
// and puts the traffic into the summary.
func (r *run) finish(sum *Summary) error {
	c := r.opt.Comm
	if err := c.Finish(r.ctx); err != nil {
		return err
	}
	for _, err := range c.AwaitPeers(r.ctx) {
		r.opt.Log.Warn().Err(err).Msg("after the last step")
	}
	tr := c.Traffic() // the pservers are done: nothing more arrives
	sum.SentBytes, sum.RecvBytes, sum.WireSentBytes, sum.WireRecvBytes = tr.Sent, tr.Recv, tr.WireSent, tr.WireRecv
	return nil
}

// save writes the named parameters and the program's own dynamic tables
// (local) to --save; in a job with tables (only trainer 0 saves there)
// with every table whole, pulled from the pservers as of the job's end
// while the file is written.
func (r *run) save(names []string, params program.Scope, local []modelfile.Entry) error {
	g, opt := r.g, r.opt
	if !r.tables || opt.TrainerIndex != 0 {
		return modelfile.SaveModelStreamed(opt.Save, g.Name, int64(r.steps), names, params, r.norm, local)
	}
	tables, err := tablesOf(g, r.batch, opt.Transfers)
	if err != nil {
		return err
	}
	more := local
	var bytes int64
	for _, t := range tables {
		if t.dynamic {
			es, n, err := dynamicEntries(r.ctx, opt.Comm, t, int64(r.steps))
			if err != nil {
				return err
			}
			more = append(more, es...)
			bytes += int64(n) * int64(8+4*t.width)
			continue
		}
		more = append(more, tableEntry(r.ctx, opt.Comm, t, int64(r.steps)))
		bytes += 4 * int64(t.rows) * int64(t.width)
	}
	opt.Log.Info().Int("tables", len(tables)).Int64("table_bytes", bytes).Str("file", opt.Save).Msg("saving the whole model: pulling the tables from the pservers")
	start := time.Now()
	if err := modelfile.SaveModelStreamed(opt.Save, g.Name, int64(r.steps), names, params, r.norm, more); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	opt.Log.Info().Float64("seconds", math.Round(secs*100)/100).Float64("mb_per_s", math.Round(float64(bytes)/1e6/secs)).Msg("pulled the tables into the file")
	return nil
}

// receiveFinal runs the recvs of the parameters the pservers serve (a
// program compiled for them alone: with no target, Compile would compile
// the whole step, and running it would send the pservers one more step's
// gradients).
func (r *run) receiveFinal(params program.Scope) error {
	opt := r.opt
	fin, err := program.Compile(r.g, program.CompileOptions{Batch: r.batch, Targets: opt.Params, Node: r.node()})
	if err != nil {
		return err
	}
	r.closers = append(r.closers, fin.Close)
	fin.OnError = r.prog.OnError
	r.rt.StepNum = int64(r.steps)
	if err := fin.Run(r.rt); err != nil {
		return fmt.Errorf("receiving the final parameters: %w", err)
	}
	for _, name := range opt.Params {
		params[name] = fin.Scope[name]
		if t := r.prog.Scope[name]; r.ev != nil && t != nil {
			t.CopyFrom(fin.Scope[name]) // the evaluator reads these
		}
	}
	return nil
}
