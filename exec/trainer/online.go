package trainer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/stream"
	"github.com/psgraph/psgraph/exec/stream/kafka"
	"github.com/psgraph/psgraph/internal/atomicfile"
)

// online is what a run reading an online source (dsl.Online) adds: the
// stream's reader, whose position every checkpoint saves with the model
// state of its step (StreamMeta), the progressive validation's window,
// and the stream's progress. docs/streaming.md.
type online struct {
	reader *stream.Reader
	what   string // the source, for logs
	win    *window
	prom   *metrics.Stream
	// ended says why the steps ended before the run's last step: the
	// source ended, or the run was asked to stop.
	ended string
	// rows per second between two progress lines
	lastRecords int64
	lastTime    time.Time
	// a run without a last step logs every logPeriod (without --log-every)
	nextLog time.Time
}

// StreamMeta is the key of a checkpoint's metadata that holds the
// stream's position (stream.Position, JSON) after the rows its steps
// trained on.
const StreamMeta = "stream"

// logPeriod is how often a run without a last step logs its progress
// when --log-every is not given.
const logPeriod = 10 * time.Second

// errStepsEnded marks the end of an online run's steps: its source ended
// or it was asked to stop.
var errStepsEnded = errors.New("the steps ended")

// openOnline opens the run's online source at the position of step
// first: a checkpoint's (at ckStep, the newest of this node at or before
// first), then skipping the batches of the steps in between, which a
// previous process trained (a trainer restarted into a running job); or,
// for a fresh run, its start.
func (r *run) openOnline(first int, ck *modelfile.Checkpointer, ckStep int64) error {
	g, opt := r.g, r.opt
	spec := g.Data
	o := spec.Online
	if g.Normalizes() && r.norm == nil && o.NormalizeRows == 0 {
		return dsl.Errorf(o.NormalizeRowsPos, "data.normalize %s on an online source (%s) takes its statistics from a saved model (--init-from) or from the stream's first rows: add normalize_rows: K to data (say 100000), or give --init-from", spec.Normalize, o.Source(spec.CSV))
	}
	if g.Normalizes() && r.norm == nil && opt.Comm != nil {
		return dsl.Errorf(o.NormalizeRowsPos, "data.normalize_rows: in a split job each trainer would take the statistics of its own first rows and normalize differently; give the job --init-from a saved model, whose statistics every trainer then uses")
	}
	// Reaching the source may wait (for brokers, for a followed file): a
	// stop ends the wait of a run that stops alone. A trainer of a split
	// job stops with its job (opt.Halt): it gets there, then stops at the
	// step the job agrees on.
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	if opt.Halt == nil {
		go func() {
			select {
			case <-opt.Stop:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	pos, skip, err := r.streamStart(ctx, first, ck, ckStep)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		return stoppedEarly(ctx, err)
	}
	src, err := r.openSource(ctx, pos)
	if err != nil {
		return stoppedEarly(ctx, err)
	}
	var scaleErr error
	parse := func(where func() string) *data.OnlineParser {
		p := data.NewOnlineParser(spec, where)
		scaleErr = p.SetScaling(r.norm)
		return p
	}
	n, t := 1, 0
	if o.Kafka == nil { // a file's chunks go to the trainers in turn
		n, t = r.n, opt.TrainerIndex
	}
	rd, err := stream.NewReader(src, pos, parse, stream.ReaderOptions{Batch: r.batch, Trainer: t, Trainers: n,
		SkipBad: o.SkipBad, NormalizeRows: o.NormalizeRows, Normalize: spec.Normalize, Log: opt.Log, Wait: o.Source(spec.CSV)})
	if err == nil {
		err = scaleErr
	}
	if err != nil {
		src.Close()
		return err
	}
	on := &online{reader: rd, what: o.Source(spec.CSV), lastTime: time.Now(), lastRecords: pos.Records}
	r.on = on
	if r.halt = opt.Halt; r.halt == nil {
		r.halt = localHalt{opt.Stop}
	}
	r.closers = append(r.closers, func() { rd.Close() })
	opt.Log.Info().Str("source", on.what).Str("position", pos.String()).Int("step", first).Msg("reading the online source")
	if g.Normalizes() && r.norm == nil { // the first rows' statistics, read before the first step
		if err := rd.Prepare(opt.Stop); err != nil {
			return err
		}
		r.norm = rd.Scaling()
	}
	if skip > 0 {
		opt.Log.Info().Int64("batches", skip).Int64("from_step", ckStep).Int("to_step", first).Msg("skipping the rows of the steps the previous process trained")
		for range skip { // trained by the previous process: a stop does not end this
			if err := rd.Fill(r.ctx.Done(), r.feed.Dst); err != nil {
				return fmt.Errorf("skipping the rows of steps %d to %d: %w", ckStep, first, err)
			}
		}
	}
	return nil
}

// stoppedEarly says that a run was stopped before its first step, when
// ctx ended (a stop) rather than err failing.
func stoppedEarly(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.New("stopped while reaching the online source, before the first step")
	}
	return err
}

// streamStart is the position the run starts reading at and the batches
// to skip after it.
func (r *run) streamStart(ctx context.Context, first int, ck *modelfile.Checkpointer, ckStep int64) (*stream.Position, int64, error) {
	if first > 0 && ckStep >= 0 {
		meta, err := ck.Metadata(ckStep)
		if err != nil {
			return nil, 0, err
		}
		s, ok := meta[StreamMeta]
		if !ok {
			return nil, 0, fmt.Errorf("checkpoint of step %d in %s holds no stream position: it was written by a run that did not read an online source; use a fresh --checkpoint-dir", ckStep, ck.Dir)
		}
		pos, err := stream.ParsePosition(s)
		if err != nil {
			return nil, 0, fmt.Errorf("checkpoint of step %d in %s: %w", ckStep, ck.Dir, err)
		}
		if want := r.sourceKind(); pos.Kind != want {
			return nil, 0, fmt.Errorf("checkpoint of step %d in %s holds a %s position, and the model reads a %s source; use a fresh --checkpoint-dir", ckStep, ck.Dir, pos.Kind, want)
		}
		return pos, int64(first) - ckStep, nil
	}
	pos, err := r.startPosition(ctx, ck)
	if err != nil {
		return nil, 0, err
	}
	if first > 0 {
		r.opt.Log.Warn().Int("step", first).Msg("no checkpoint of this trainer's stream position at or before the job's step: skipping the rows of every step from the stream's start")
	}
	return pos, int64(first), nil
}

func (r *run) sourceKind() string {
	o := r.g.Data.Online
	switch {
	case o.Kafka != nil:
		return stream.KindKafka
	case o.Stdin:
		return stream.KindStdin
	case o.Dir:
		return stream.KindDir
	}
	return stream.KindFile
}

// startPosition is where a run without a checkpoint starts: a file's
// start, or a Kafka topic's start offsets (earliest, latest, a time),
// resolved once and kept in the checkpoint directory (N.stream-start.json),
// so a run killed before its first checkpoint starts again at the same
// offsets.
func (r *run) startPosition(ctx context.Context, ck *modelfile.Checkpointer) (*stream.Position, error) {
	kind := r.sourceKind()
	if kind != stream.KindKafka {
		return &stream.Position{Kind: kind}, nil
	}
	var file string
	if ck != nil && ck.Dir != "" {
		file = filepath.Join(ck.Dir, ck.Node+".stream-start.json")
		if b, err := os.ReadFile(file); err == nil {
			pos, err := stream.ParsePosition(string(b))
			if err != nil {
				return nil, fmt.Errorf("%s: %w (remove it to start afresh)", file, err)
			}
			r.opt.Log.Info().Str("file", file).Msg("starting at the stream position a previous process of this run resolved")
			return pos, nil
		}
	}
	pos, err := kafka.Start(ctx, r.kafkaOptions())
	if err != nil {
		return nil, err
	}
	if file != "" {
		if err := os.MkdirAll(ck.Dir, 0o755); err != nil {
			return nil, err
		}
		if err := atomicfile.WriteBytes(file, []byte(pos.Marshal()+"\n")); err != nil {
			return nil, fmt.Errorf("writing the stream's start position: %w", err)
		}
	}
	return pos, nil
}

func (r *run) kafkaOptions() kafka.Options {
	return kafka.Options{Spec: r.g.Data.Online.Kafka, Trainer: r.opt.TrainerIndex, Trainers: r.n, Log: r.opt.Log}
}

// openSource opens the run's source at pos.
func (r *run) openSource(ctx context.Context, pos *stream.Position) (stream.Source, error) {
	o := r.g.Data.Online
	if o.Kafka != nil {
		if len(pos.Partitions) > 0 && pos.Partitions[0]%int32(r.n) != int32(r.opt.TrainerIndex) {
			return nil, fmt.Errorf("the checkpoint's stream position takes partitions %v, which are not trainer %d's of %d: the job's trainers changed; use a fresh --checkpoint-dir", pos.Partitions, r.opt.TrainerIndex, r.n)
		}
		return kafka.Open(ctx, pos, r.kafkaOptions())
	}
	return stream.OpenFile(ctx, r.g.Data.CSV, pos, stream.FileOptions{Follow: o.Follow, Stdin: r.opt.Stdin, Log: r.opt.Log})
}

// fill feeds step k's batch from the online source; errStepsEnded when
// the source ended or the run's steps are over (it was asked to stop).
// It waits for the batch without taking it (a stop asked meanwhile ends
// the wait), asks the run's halt whether step k runs, and only then takes
// the batch: rows not trained stay in the stream, after the position the
// last checkpoint saves. A step that runs gets its batch, however long
// the rows take (a sync job's agreed last steps need every trainer's).
func (on *online) fill(r *run, k int) error {
	err := on.reader.Ready(r.halt.Asked(), r.feed.Dst)
	if err != nil && !errors.Is(err, stream.ErrStopped) {
		return on.ending(err)
	}
	run, err := r.halt.Enter(r.ctx, int64(k))
	if err != nil {
		return err
	}
	if !run {
		on.ended = "stopped"
		return errStepsEnded
	}
	if err := on.reader.Fill(r.ctx.Done(), r.feed.Dst); err != nil {
		if errors.Is(err, stream.ErrStopped) {
			return r.ctx.Err()
		}
		return on.ending(err)
	}
	return nil
}

// ending is errStepsEnded when the source ended, else err.
func (on *online) ending(err error) error {
	if errors.Is(err, io.EOF) {
		on.ended = "the stream ended"
		return errStepsEnded
	}
	return err
}

// Halt is a split job's stop as a trainer takes part in it (comm.Halt).
type Halt interface {
	// Asked is closed once the job was asked to stop.
	Asked() <-chan struct{}
	// Started says the trainer's first step.
	Started(first int64)
	// Enter says whether step k runs: false once the trainer's steps are
	// over; it may wait for the job's trainers to agree on the last step.
	Enter(ctx context.Context, k int64) (bool, error)
	// Ended says the trainer ran steps steps and runs no more.
	Ended(steps int64)
}

// localHalt is the halt of a run that stops alone (a local run): its
// steps are over once stop is closed.
type localHalt struct{ stop <-chan struct{} }

func (h localHalt) Asked() <-chan struct{} { return h.stop }
func (h localHalt) Started(int64)          {}
func (h localHalt) Ended(int64)            {}

func (h localHalt) Enter(context.Context, int64) (bool, error) {
	select {
	case <-h.stop:
		return false, nil
	default:
		return true, nil
	}
}

// stepped records a step's progress: its batch into the window, the
// stream's counts for /metrics.
func (on *online) stepped(s program.Scope) error {
	if err := on.win.add(s); err != nil {
		return err
	}
	p := on.reader.Position()
	lag, ok := on.reader.Lag()
	on.prom.Progress(p.Records, p.Bad, lag, ok)
	on.prom.IdleSkips(on.reader.IdleSkips())
	return nil
}

// due says whether step k (from 0) gets a progress line: every logEvery
// steps, or for a run without a last step and without --log-every every
// logPeriod.
func (on *online) due(k, logEvery int, now time.Time) bool {
	if logEvery > 0 {
		return (k+1)%logEvery == 0
	}
	if now.Before(on.nextLog) {
		return false
	}
	on.nextLog = now.Add(logPeriod)
	return true
}

// progress adds the stream's fields to a progress line: the window's
// values, the rows per second since the last line, the lag and the bad
// rows; more writes them to the metrics file's line.
func (on *online) progress(ev *zerolog.Event, names []string) (*zerolog.Event, func(w *bufio.Writer)) {
	vals := on.win.values()
	now := time.Now()
	p := on.reader.Position()
	rate := float64(p.Records-on.lastRecords) / now.Sub(on.lastTime).Seconds()
	on.lastRecords, on.lastTime = p.Records, now
	on.prom.Window(vals, rate)
	for i, n := range names {
		ev = ev.Float64("window_"+n, vals[i])
	}
	ev = ev.Int("window_rows", on.win.rows()).Float64("rows_per_s", math.Round(rate))
	lag, ok := on.reader.Lag()
	if ok {
		ev = ev.Int64("lag", lag)
	}
	if p.Bad > 0 {
		ev = ev.Int64("bad_rows", p.Bad)
	}
	skips := on.reader.IdleSkips()
	if skips > 0 {
		ev = ev.Int64("idle_skips", skips)
	}
	more := func(w *bufio.Writer) {
		for i, n := range names {
			k, _ := json.Marshal("window_" + n)
			fmt.Fprintf(w, ",%s:%s", k, evaluate.JSONNum(vals[i]))
		}
		fmt.Fprintf(w, `,"window_rows":%d,"rows_per_s":%s,"records":%d,"bad_rows":%d`, on.win.rows(), evaluate.JSONNum(rate), p.Records, p.Bad)
		if ok {
			fmt.Fprintf(w, `,"lag":%d`, lag)
		}
		if skips > 0 {
			fmt.Fprintf(w, `,"idle_skips":%d`, skips)
		}
	}
	return ev, more
}

// StreamSummary is what a run's summary says of its online source.
type StreamSummary struct {
	Source string `json:"source"`
	// Ended: "steps" (the run's last step), "stopped" (a signal), or "the
	// stream ended".
	Ended string `json:"ended"`
	// Records consumed by the steps (trained, skipped as bad or, for a
	// file read by several trainers, another trainer's), bad rows skipped.
	Records int64 `json:"records"`
	BadRows int64 `json:"bad_rows"`
	// IdleSkips: turns of a Kafka source's round robin passed over
	// (data.kafka.idle_after).
	IdleSkips int64           `json:"idle_skips,omitempty"`
	Window    int             `json:"window_rows"`
	Position  json.RawMessage `json:"position"`
}

// fillSummary puts the window's loss and metrics (the progressive
// validation of the last rows) into the summary.
func (on *online) fillSummary(sum *Summary, names []string) {
	vals := on.win.values()
	sum.Loss = vals[0]
	for i, m := range names[1:] {
		sum.Metrics[m] = vals[i+1]
	}
	p := on.reader.Position()
	ended := on.ended
	if ended == "" {
		ended = "steps"
	}
	sum.Stream = &StreamSummary{Source: on.what, Ended: ended, Records: p.Records, BadRows: p.Bad, IdleSkips: on.reader.IdleSkips(), Window: on.win.rows(), Position: json.RawMessage(p.Marshal())}
}

// onlineUsage checks the options an online run cannot take.
func onlineUsage(g *dsl.Graph, opt RunOptions) error {
	if opt.FinalPass == FinalPassOn {
		return fmt.Errorf("--final-pass evaluates the whole training data after the last step, and %s is an online source: its rows are read once; the summary reports the progressive validation of the last data.metrics_window rows instead", g.Data.Online.Source(g.Data.CSV))
	}
	return nil
}

// describeEnd is the log line of an online run's end.
func (on *online) describeEnd(log zerolog.Logger, steps int) {
	if on.ended == "" {
		return
	}
	p := on.reader.Position()
	log.Info().Int("steps", steps).Int64("records", p.Records).Str("position", p.String()).Msg(strings.ToUpper(on.ended[:1]) + on.ended[1:] + ": finishing after the last whole step")
}
