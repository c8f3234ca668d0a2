package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/replicate"
	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
)

// FollowOptions says which job a replica follows (psgraph serve --plan).
type FollowOptions struct {
	Plan      *partition.Plan
	Endpoints []string // every pserver's address, in index order
	Token     string
	TLS       *tls.Config
	Index     int // the replica's index (replica-N on the wire)
	// SourceSHA256 is the model file's hash (partition.HashSource), checked
	// against the plan's ("": not checked).
	SourceSHA256 string
}

// follower is a model following a job's pservers: a reader per pserver
// (subscribe, read deltas, subscribe again when the connection is lost
// or the pserver restarted) and one loop that drives replicate.Follow and
// applies each delta to the model (Model.Apply).
type follower struct {
	*Model
	opt    FollowOptions
	log    zerolog.Logger
	follow *replicate.Follow
	events chan event
	ready  atomic.Bool
	// seen is when the newest delta not yet applied arrived (0: none).
	seen    atomic.Int64
	applied atomic.Int64 // updates applied
	// missing names the model's tensors no delta has written yet (a
	// pserver's full state writes those it holds, pserver 0's the state
	// trainer 0 holds and pushes to it): the replica is ready once none
	// is missing. Only the loop touches it.
	missing map[string]bool
}

// event is what a reader tells the loop: a whole delta, or a lost
// subscription (conn nil), or the job's end.
type event struct {
	pserver  int
	inc      uint64
	step     int64
	full     bool
	rows     []replicate.Rows
	shards   []replicate.Shard // the state of the pserver's dynamic shards
	lost     bool
	finished bool
	drop     func() // closes the reader's connection (Resubscribe)
}

// newFollower makes the model g, with zero parameters until the
// pservers' full states arrive, and its statistics computed from the
// model's data as the job's trainers compute them.
func newFollower(g *dsl.Graph, opt FollowOptions, maxBatch int, log zerolog.Logger) (*follower, error) {
	if len(opt.Endpoints) != opt.Plan.Info.PServers {
		return nil, fmt.Errorf("--pserver-endpoints has %d addresses, and the plan has %d pservers", len(opt.Endpoints), opt.Plan.Info.PServers)
	}
	if opt.SourceSHA256 != "" && opt.SourceSHA256 != opt.Plan.Info.SourceSHA256 {
		return nil, fmt.Errorf("%s is not the model the plan was split from (its source differs); give the model file the job runs", g.File)
	}
	types, err := g.Infer(1)
	if err != nil {
		return nil, err
	}
	p := Params{Version: -1, VersionIs: VersionStep, Tensors: map[string]*tensor.Tensor{}}
	_, lowered, err := dsl.LowerDynamic(g)
	if err != nil {
		return nil, err
	}
	for _, dt := range lowered { // each a mirror of its shards on every pserver
		cfg, err := program.TableConfig(dt)
		if err != nil {
			return nil, err
		}
		t, err := dyntable.NewMirror(cfg, opt.Plan.Info.PServers)
		if err != nil {
			return nil, fmt.Errorf("dynamic table %s: %w", dt.Name, err)
		}
		if p.Tables == nil {
			p.Tables = map[string]*dyntable.Table{}
		}
		p.Tables[dt.Name] = t
	}
	for _, name := range g.ModelVars() {
		if p.Tables[name] == nil {
			p.Tensors[name] = tensor.New(types[name].DType, types[name].Shape)
		}
	}
	if p.Norm, err = data.TrainingScaling(g.Data); err != nil {
		return nil, err
	}
	m, err := NewModel(g, p, maxBatch)
	if err != nil {
		return nil, err
	}
	missing := map[string]bool{}
	for name := range p.Tensors {
		missing[name] = true
	}
	return &follower{Model: m, opt: opt, log: log, follow: replicate.NewFollow(len(opt.Endpoints)), events: make(chan event, 4), missing: missing}, nil
}

// Ready says whether the replica serves the job's state: it caught up
// with every pserver once (it stays ready while a lost pserver comes
// back, and after the job, serving its last step).
func (f *follower) Ready() bool { return f.ready.Load() }

// staleness is how long the newest delta received has waited to be
// applied (0: none waits).
func (f *follower) staleness() float64 {
	if t := f.seen.Load(); t > 0 {
		return time.Since(time.Unix(0, t)).Seconds()
	}
	return 0
}

// run follows the job until ctx ends.
func (f *follower) run(ctx context.Context, met *Metrics) error {
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); wg.Wait() }()
	fatal := make(chan error, len(f.opt.Endpoints))
	for i := range f.opt.Endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.read(ctx, i); err != nil {
				fatal <- err
			}
		}()
	}
	finished := make([]bool, len(f.opt.Endpoints))
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-fatal:
			return err
		case ev := <-f.events:
			switch {
			case ev.finished:
				finished[ev.pserver] = true
				if !slicesAll(finished) {
					continue
				}
				f.log.Info().Int64("step", f.Version()).Msg("the job finished; serving its last step")
			case ev.lost:
				// A replica that was caught up stays ready while it waits for
				// a lost pserver (which the job waits for too), serving the
				// newest state it has; a new one is ready only once caught up.
				f.follow.Lost(ev.pserver)
			default:
				err := f.apply(ev, met)
				for _, r := range ev.rows { // applied (copied) or dropped: their buffers read the next deltas
					replicate.Recycle(r)
				}
				if err != nil {
					return err
				}
			}
		}
	}
}

func slicesAll(b []bool) bool {
	for _, x := range b {
		if !x {
			return false
		}
	}
	return true
}

// apply applies a delta of a pserver, as Follow decides.
func (f *follower) apply(ev event, met *Metrics) error {
	if ev.full {
		f.follow.Subscribed(ev.pserver, ev.inc, ev.step)
	}
	act, err := f.follow.Received(ev.pserver, ev.inc, replicate.Delta{Step: ev.step, Full: ev.full})
	if act == replicate.Resubscribe {
		f.log.Warn().Err(err).Msg("subscribing again")
		ev.drop()
		return nil
	}
	u := Update{Step: f.follow.Version()}
	for _, sh := range ev.shards {
		u.Shards = append(u.Shards, ShardState{Name: sh.Name, Shard: sh.Shard, Shards: sh.Shards, Watermark: sh.Watermark, Whole: ev.full})
	}
	for _, r := range ev.rows {
		if err := f.updateOf(&u, r); err != nil {
			f.log.Error().Err(err).Int("pserver", ev.pserver).Msg("a delta that does not fit the model; subscribing again")
			ev.drop()
			return nil
		}
	}
	if err := f.Apply(u); err != nil {
		f.log.Error().Err(err).Int("pserver", ev.pserver).Msg("subscribing again")
		ev.drop()
		return nil
	}
	for _, t := range f.cur.Load().Tables {
		t.SweepMirror(sweepPerUpdate)
	}
	f.seen.Store(0)
	f.applied.Add(1)
	met.Updated()
	for _, d := range u.Dense {
		delete(f.missing, d.Name)
	}
	for _, r := range u.Rows {
		delete(f.missing, r.Name)
	}
	if !f.ready.Load() && f.follow.Ready() && len(f.missing) > 0 && ev.full {
		f.log.Info().Strs("waiting_for", slices.Sorted(maps.Keys(f.missing))).Msg("caught up with every pserver; waiting for the state trainer 0 holds (pushed to pserver-0)")
	}
	if !f.ready.Load() && f.follow.Ready() && len(f.missing) == 0 {
		f.log.Info().Int64("step", u.Step).Msg("caught up with every pserver; ready")
		f.ready.Store(true)
	}
	return nil
}

// sweepPerUpdate is the records of each dynamic table an update sweeps
// for rows its shard's watermark killed (their memory is freed).
const sweepPerUpdate = 1 << 16

// updateOf adds rows r of a delta to u: a dynamic table's rows by key, a
// fixed table's rows by id, a dense parameter's values by offset.
func (f *follower) updateOf(u *Update, r replicate.Rows) error {
	if r.Keys != nil {
		u.Rows = append(u.Rows, TableRows{Name: r.Name, Keys: r.Keys, Meta: r.Meta, Values: r.Values})
		return nil
	}
	t, ok := f.cur.Load().Tensors[r.Name]
	width := 1
	if ok && len(t.Shape) > 1 {
		width = t.Shape[1:].Numel()
	}
	if !ok || t.DType != tensor.F32 || r.Width != width {
		return fmt.Errorf("rows of %q (width %d) are not the model's", r.Name, r.Width)
	}
	ids := r.IDs
	if ids == nil && (f.tables[r.Name] || r.Stride != 1) {
		ids = make([]int64, r.Count())
		for i := range ids {
			ids[i] = r.First + int64(i)*r.Stride
		}
	}
	if f.tables[r.Name] {
		u.Rows = append(u.Rows, TableRows{Name: r.Name, IDs: ids, Values: r.Values})
		return nil
	}
	if ids == nil {
		u.Dense = append(u.Dense, DenseValues{Name: r.Name, Offset: int(r.First) * r.Width, Values: r.Values})
		return nil
	}
	for i, id := range ids { // a dense parameter in strided rows
		u.Dense = append(u.Dense, DenseValues{Name: r.Name, Offset: int(id) * r.Width, Values: r.Values[i*r.Width : (i+1)*r.Width]})
	}
	return nil
}

// read subscribes to pserver i and reads its deltas into events, again
// after every lost connection, until ctx ends or the job finished. Only a
// refusal (the token or the job is not the pserver's) is returned.
func (f *follower) read(ctx context.Context, i int) error {
	cfg := transport.Config{Self: transport.Replica(f.opt.Index), Token: []byte(f.opt.Token), JobHash: f.opt.Plan.JobHash(), TLS: f.opt.TLS}
	backoff := 20 * time.Millisecond
	log := f.log.With().Int("pserver", i).Logger()
	for ctx.Err() == nil {
		c, inc, err := transport.DialReplica(ctx, cfg, transport.PServer(i), f.opt.Endpoints[i])
		if errors.Is(err, transport.ErrAuth) || errors.Is(err, transport.ErrJobMismatch) {
			return fmt.Errorf("following pserver-%d: %w (give the replica the job's token, PSGRAPH_TOKEN or --token-file, and its plan)", i, err)
		}
		if err == nil {
			backoff = 20 * time.Millisecond
			stop := context.AfterFunc(ctx, func() { c.Close() })
			var once sync.Once
			drop := func() { once.Do(func() { c.Close() }) }
			finished, err := f.readConn(ctx, i, inc, c, drop)
			stop()
			drop()
			if finished {
				f.send(ctx, event{pserver: i, finished: true})
				return nil
			}
			log.Debug().Err(err).Msg("subscription lost; subscribing again")
			f.send(ctx, event{pserver: i, lost: true})
		} else {
			log.Debug().Err(err).Msg("cannot subscribe yet; retrying")
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
	return nil
}

func (f *follower) send(ctx context.Context, ev event) {
	select {
	case f.events <- ev:
	case <-ctx.Done():
	}
}

// readConn reads one subscription's deltas; true when the pserver said
// the job finished.
func (f *follower) readConn(ctx context.Context, i int, inc uint64, c interface {
	Read([]byte) (int, error)
	Write([]byte) (int, error)
}, drop func()) (bool, error) {
	if err := replicate.WriteHello(c); err != nil {
		return false, err
	}
	r := replicate.NewReader(c)
	var ev *event
	for {
		fr, err := r.Next()
		if err != nil {
			return false, err
		}
		switch fr.Kind {
		case replicate.FrameBegin:
			ev = &event{pserver: i, inc: inc, step: fr.Step, full: fr.Full, drop: drop}
			f.seen.CompareAndSwap(0, time.Now().UnixNano())
		case replicate.FrameRows:
			if ev == nil {
				return false, errors.New("rows outside a delta")
			}
			ev.rows = append(ev.rows, fr.Rows)
		case replicate.FrameShard:
			if ev == nil {
				return false, errors.New("a shard's state outside a delta")
			}
			ev.shards = append(ev.shards, fr.Shard)
		case replicate.FrameEnd:
			if ev == nil {
				return false, errors.New("the end of a delta that did not begin")
			}
			f.send(ctx, *ev)
			ev = nil
		case replicate.FrameFinished:
			return true, nil
		}
	}
}
