package trainer

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/program"
)

// stepLog is the rate of the steps since the last logged one.
type stepLog struct {
	start, last time.Time
	lastStep    int
}

// logStep logs step k (its loss, metrics, rate and progress) and writes
// it to the metrics file; a NaN loss stops the run.
func (r *run) logStep(lg *stepLog, k int) error {
	g, s := r.g, r.prog.Scope
	loss := float64(s[g.Train.Loss].F[0])
	now := time.Now()
	sps := float64(k+1-lg.lastStep) / now.Sub(lg.last).Seconds()
	lg.last, lg.lastStep = now, k+1
	ev := r.opt.Log.Info().Int("step", k+1).Float64("loss", loss)
	for _, m := range g.Train.Metrics {
		ev = ev.Float64(m, float64(s[m].F[0]))
	}
	ev = ev.Float64("steps_per_s", math.Round(sps))
	var more func(*bufio.Writer)
	if r.on != nil {
		ev, more = r.on.progress(ev, r.on.win.names)
	}
	if r.metrics != nil {
		writeMetrics(r.metrics, k+1, g, s, sps, r.opt.Role, more)
	}
	// Progress: of the run's steps, done, and the time left at the
	// run's rate so far.
	if r.steps > 0 {
		eta := time.Duration(float64(now.Sub(lg.start)) / float64(k+1-r.first) * float64(r.steps-k-1))
		ev = ev.Int("of", r.steps).Int("pct", 100*(k+1)/r.steps).Str("eta", eta.Round(time.Second).String())
	}
	ev.Msg("train")
	if math.IsNaN(loss) {
		return fmt.Errorf("step %d: the loss is NaN; lower the learning rate or check the data normalization", k+1)
	}
	return nil
}

// writeMetrics writes a step's line of the metrics file; more (nil:
// none) writes more fields into it.
func writeMetrics(w *bufio.Writer, step int, g *dsl.Graph, s program.Scope, sps float64, role string, more func(*bufio.Writer)) {
	fmt.Fprintf(w, `{"step":%d,"role":%q,"loss":%s`, step, role, evaluate.JSONNum(float64(s[g.Train.Loss].F[0])))
	for _, m := range g.Train.Metrics {
		k, _ := json.Marshal(m)
		fmt.Fprintf(w, ",%s:%s", k, evaluate.JSONNum(float64(s[m].F[0])))
	}
	fmt.Fprintf(w, `,"steps_per_s":%s`, evaluate.JSONNum(sps))
	if more != nil {
		more(w)
	}
	w.WriteString("}\n")
}

// logEval evaluates the held-out data after step, logs the result and
// writes it to the metrics file as eval_loss and eval_<metric>. The
// values it returns are valid until the next evaluation.
func logEval(ctx context.Context, ev *evaluate.Evaluator, step int, g *dsl.Graph, opt RunOptions, w *bufio.Writer) ([]float64, error) {
	vals, err := ev.Run(ctx)
	if err != nil {
		return nil, fmt.Errorf("evaluating the held-out data after step %d: %w", step, err)
	}
	e := opt.Log.Info().Int("step", step).Float64("eval_loss", vals[0])
	for i, m := range g.Train.Metrics {
		e = e.Float64("eval_"+m, vals[i+1])
	}
	e.Int("rows", ev.Rows).Msg("eval")
	if w != nil {
		fmt.Fprintf(w, `{"step":%d,"role":%q,"eval_loss":%s`, step, opt.Role, evaluate.JSONNum(vals[0]))
		for i, m := range g.Train.Metrics {
			k, _ := json.Marshal("eval_" + m)
			fmt.Fprintf(w, ",%s:%s", k, evaluate.JSONNum(vals[i+1]))
		}
		w.WriteString("}\n")
	}
	return vals, nil
}
