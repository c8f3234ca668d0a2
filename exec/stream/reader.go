package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/tensor"
)

// ReaderOptions configure a Reader.
type ReaderOptions struct {
	Batch int // rows of a batch
	// Trainer and Trainers: a file source read by several trainers of a
	// job is cut into chunks of Batch records, chunk c going to trainer
	// c mod Trainers; each trainer's reader skips the others' chunks
	// (every trainer reads the whole file). A Kafka source's readers take
	// their own partitions instead; Trainers is then 1 for the reader.
	Trainer, Trainers int
	// SkipBad: a row that does not parse is counted, logged and skipped;
	// otherwise the reader stops with an error naming it.
	SkipBad bool
	// NormalizeRows > 0 and Normalize (a mode other than none), when the
	// parser has no scaling: the statistics of the first NormalizeRows
	// rows normalize the stream, those rows included.
	NormalizeRows int
	Normalize     string
	// Ahead is the number of batches read ahead of training (0: 4).
	Ahead int
	Log   zerolog.Logger
	// Wait names the source in the log line Fill writes when it has
	// waited for rows for a while ("" : the source's kind).
	Wait string
}

// Reader turns a source's records into batches, parsing them on a
// goroutine of its own ahead of training into batches of its own, each
// with the position just after its last record; Fill copies the next
// batch into the program's tensors and takes its position as the
// position of the rows trained (Position), which is what a checkpoint
// must save: the reader's own position is further on. A row is in one
// batch only, and the batches depend only on the source's records.
//
// Fill and Position are for one goroutine, the training loop.
type Reader struct {
	src   Source
	parse *data.OnlineParser
	opt   ReaderOptions
	pos   Position // after the records the goroutine consumed
	// trained is the position after the last batch Fill returned.
	trained Position
	free    chan *batch
	full    chan *batch
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	started bool
	// prepared: Prepare took the normalization statistics already.
	prepared bool
	err      error // sticky: the end or the failure Fill returned
	// ready is the next batch, taken by Ready and not yet by Fill.
	ready *batch
	timer *time.Timer
	cur   *Record
	// replay holds the records the normalization statistics were taken
	// from, copied, to be parsed again as the stream's first rows.
	replay []Record
	logged int64 // bad rows logged one by one
}

// batch is one batch read ahead: its rows in tensors of its own, the
// position after its last record, or the error that ended the reading.
type batch struct {
	ts  []*tensor.Tensor
	pos Position
	err error
}

// NewReader reads src, opened at pos, into batches parsed by parse (its
// errors name a row by the source's Where).
func NewReader(src Source, pos *Position, parse func(where func() string) *data.OnlineParser, opt ReaderOptions) (*Reader, error) {
	if opt.Batch <= 0 {
		return nil, fmt.Errorf("a stream reader needs a positive batch, got %d", opt.Batch)
	}
	opt.Trainers = max(opt.Trainers, 1)
	if opt.Ahead <= 0 {
		opt.Ahead = 4
	}
	r := &Reader{src: src, opt: opt}
	r.parse = parse(func() string { return src.Where(r.cur) })
	r.pos.copyFrom(pos)
	r.pos.Partitions = append([]int32(nil), pos.Partitions...)
	r.trained.copyFrom(pos)
	r.trained.Partitions = append([]int32(nil), pos.Partitions...)
	if opt.NormalizeRows > 0 && opt.Trainers > 1 {
		return nil, fmt.Errorf("normalize_rows takes the statistics of one reader's first rows, and this reader is one of %d trainers' (each would normalize differently); give the trainers --init-from a saved model's statistics", opt.Trainers)
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.done = make(chan struct{})
	return r, nil
}

// Fill copies the next batch into the data tensors dst (one per data
// variable, in data order, nil where a variable is not fed; their rows
// the reader's batch). It returns io.EOF when the source ended (rows
// short of a whole batch at its end are not trained), ErrStopped when
// stop is closed before the batch is there, or the error that ended the
// reading (a bad row, a source's failure), again at every call after.
func (r *Reader) Fill(stop <-chan struct{}, dst []*tensor.Tensor) error {
	if r.err != nil {
		return r.err
	}
	b := r.ready
	r.ready = nil
	if b == nil {
		if b = r.take(stop, dst); b == nil {
			return ErrStopped
		}
	}
	if b.err != nil {
		r.err = b.err
		return b.err
	}
	for i, t := range dst {
		if t != nil {
			copy(t.F, b.ts[i].F)
			copy(t.I, b.ts[i].I)
			copy(t.L, b.ts[i].L)
		}
	}
	r.trained.copyFrom(&b.pos)
	r.free <- b
	return nil
}

// Ready waits until the next batch is there without taking it, so that
// a run can decide whether it trains that batch (a job asked to stop
// agrees on its last step first) and leave it, and the position, as they
// are if not: nil when the batch is there, ErrStopped when stop is closed
// first, or what Fill would return (io.EOF, the reading's failure). The
// next Fill takes the batch.
func (r *Reader) Ready(stop <-chan struct{}, dst []*tensor.Tensor) error {
	if r.err != nil {
		return r.err
	}
	if r.ready == nil {
		if r.ready = r.take(stop, dst); r.ready == nil {
			return ErrStopped
		}
	}
	if err := r.ready.err; err != nil {
		r.err, r.ready = err, nil
		return err
	}
	return nil
}

// take receives the next batch, waiting for it; nil when stop is closed
// first.
func (r *Reader) take(stop <-chan struct{}, dst []*tensor.Tensor) *batch {
	if !r.started {
		r.start(dst)
	}
	select {
	case b := <-r.full:
		return b
	default:
		return r.wait(stop)
	}
}

// waitLog is how long Fill waits for rows before it says so, and then
// how often it says it again.
var waitLog = [2]time.Duration{5 * time.Second, time.Minute}

// wait waits for the next batch, logging while the source has no rows;
// nil when stop is closed first.
func (r *Reader) wait(stop <-chan struct{}) *batch {
	if r.timer == nil {
		r.timer = time.NewTimer(waitLog[0])
	} else {
		r.timer.Reset(waitLog[0])
	}
	defer r.timer.Stop()
	start := time.Now()
	for {
		select {
		case b := <-r.full:
			return b
		case <-stop:
			return nil
		case <-r.timer.C:
			what := r.opt.Wait
			if what == "" {
				what = "the " + r.pos.Kind + " source"
			}
			r.opt.Log.Info().Dur("waited", time.Since(start).Round(time.Second)).Str("position", r.trained.String()).Msg("waiting for rows from " + what)
			r.timer.Reset(waitLog[1])
		}
	}
}

// Prepare reads the stream's first rows for the normalization
// statistics now (NormalizeRows), before the first Fill; ErrStopped when
// stop is closed first.
func (r *Reader) Prepare(stop <-chan struct{}) error {
	if r.started || r.prepared {
		return nil
	}
	r.prepared = true
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := r.observe(ctx)
	select {
	case <-stop:
		return ErrStopped
	default:
	}
	if err != nil {
		r.err = err
	}
	return err
}

// Position is the position just after the rows of the batches Fill
// returned.
func (r *Reader) Position() *Position { return &r.trained }

// Scaling is the normalization the reader applies (nil: none): given, or
// taken from the stream's first rows. Valid once Fill returned a batch.
func (r *Reader) Scaling() *data.Scaling { return r.parse.Scaling() }

// Truncated is what multi-valued columns lost to their max_len in the
// rows parsed so far. Valid once the reader is closed.
func (r *Reader) Truncated() []data.Truncation { return r.parse.Truncated() }

// Lag is how many messages the source holds after the rows trained
// (Kafka: behind the partitions' log ends); false when unknown.
func (r *Reader) Lag() (int64, bool) {
	if l, ok := r.src.(Lagger); ok {
		return l.Lag(&r.trained)
	}
	return 0, false
}

// IdleSkips is the number of turns of the source's round robin passed
// over because their partition had no record while others had (0 for a
// source without partitions).
func (r *Reader) IdleSkips() int64 {
	if s, ok := r.src.(Skipper); ok {
		return s.IdleSkips()
	}
	return 0
}

// Close stops the reading and closes the source.
func (r *Reader) Close() error {
	r.cancel()
	if r.started {
		<-r.done
	}
	return r.src.Close()
}

// start allocates the batches read ahead, shaped as dst, and starts the
// goroutine reading into them.
func (r *Reader) start(dst []*tensor.Tensor) {
	r.started = true
	r.free, r.full = make(chan *batch, r.opt.Ahead), make(chan *batch, r.opt.Ahead)
	for range r.opt.Ahead {
		b := &batch{ts: make([]*tensor.Tensor, len(dst))}
		for i, t := range dst {
			if t != nil {
				b.ts[i] = tensor.New(t.DType, t.Shape)
			}
		}
		b.pos.copyFrom(&r.pos)
		b.pos.Partitions = append([]int32(nil), r.pos.Partitions...)
		r.free <- b
	}
	go r.run()
}

// run reads batches until the source ends or fails or the reader closes.
func (r *Reader) run() {
	defer close(r.done)
	if !r.prepared {
		if err := r.observe(r.ctx); err != nil {
			r.fail(err)
			return
		}
	}
	for {
		var b *batch
		select {
		case b = <-r.free:
		case <-r.ctx.Done():
			return
		}
		if err := r.fillBatch(b); err != nil {
			if errors.Is(err, context.Canceled) && r.ctx.Err() != nil {
				return
			}
			b.err = err
			r.full <- b
			return
		}
		b.pos.copyFrom(&r.pos)
		r.full <- b
	}
}

// fail hands err to Fill in place of the next batch.
func (r *Reader) fail(err error) {
	select {
	case b := <-r.free:
		b.err = err
		r.full <- b
	case <-r.ctx.Done():
	}
}

// fillBatch parses the next Batch good rows into b.
func (r *Reader) fillBatch(b *batch) error {
	rows := 0
	for rows < r.opt.Batch {
		rec, err := r.next()
		if err == io.EOF && rows > 0 {
			r.opt.Log.Warn().Int("rows", rows).Int("batch", r.opt.Batch).Msg("the stream ended with rows short of a whole batch: they are not trained")
		}
		if err != nil {
			return err
		}
		if r.parse.Blank(rec.Value) {
			continue
		}
		if err := r.parse.Parse(rec.Value, b.ts, rows); err != nil {
			if err := r.bad(err); err != nil {
				return err
			}
			continue
		}
		rows++
	}
	return nil
}

// bad counts a row that did not parse, and logs it (the first 10 one by
// one, then every 1000th); without SkipBad it is the reading's end.
func (r *Reader) bad(err error) error {
	if !r.opt.SkipBad {
		return fmt.Errorf("%w (a bad row stops the run; data.on_bad_row: skip counts, logs and skips bad rows instead; the newest checkpoint's position is before this row)", err)
	}
	r.pos.Bad++
	if r.logged < 10 || r.pos.Bad%1000 == 0 {
		r.logged++
		r.opt.Log.Warn().Int64("bad_rows", r.pos.Bad).Err(err).Msg("skipped a bad row")
	}
	return nil
}

// next is the next record of this reader's rows, past the records of the
// other trainers' chunks; the reader's position moves past it.
func (r *Reader) next() (*Record, error) {
	for {
		rec, err := r.record()
		if err != nil {
			return nil, err
		}
		i := r.pos.Records
		r.pos.advance(rec)
		r.cur = rec
		if r.opt.Trainers > 1 && r.pos.Kind != KindKafka && int((i/int64(r.opt.Batch))%int64(r.opt.Trainers)) != r.opt.Trainer {
			continue
		}
		return rec, nil
	}
}

// record is the next record: one read for the statistics, or the source's.
func (r *Reader) record() (*Record, error) {
	if len(r.replay) > 0 {
		rec := &r.replay[0]
		r.replay = r.replay[1:]
		return rec, nil
	}
	r.replay = nil
	return r.src.Next(r.ctx)
}

// observe takes the normalization statistics from the stream's first
// NormalizeRows rows when the parser has none, keeping the records to be
// parsed again as the first rows.
func (r *Reader) observe(ctx context.Context) error {
	o := r.opt
	if o.NormalizeRows <= 0 || o.Normalize == "" || o.Normalize == "none" || r.parse.Scaling() != nil || r.parse.Features() == 0 {
		return nil
	}
	var kept []Record
	rows := 0
	for rows < o.NormalizeRows {
		rec, err := r.src.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		c := *rec
		c.Value = append([]byte(nil), rec.Value...)
		kept = append(kept, c)
		if r.parse.Blank(rec.Value) {
			continue
		}
		r.cur = rec
		if r.parse.Observe(rec.Value) == nil { // a bad row is reported when it is parsed again
			rows++
		}
	}
	sc := r.parse.Observed(o.Normalize)
	if err := r.parse.SetScaling(sc); err != nil {
		return err
	}
	if sc != nil {
		o.Log.Info().Int("rows", rows).Str("normalize", o.Normalize).Msg("normalizing the stream with the statistics of its first rows")
	}
	r.replay = kept
	return nil
}
