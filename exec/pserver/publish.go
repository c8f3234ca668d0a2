package pserver

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/replicate"
	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/transport"
)

// Publisher serves the parameters a pserver holds to serving replicas
// (psgraph serve following the job; docs/serving.md). The transport hands
// it each replica's authenticated connection (transport.Config.Replicas,
// Handle); it sends the replica everything the pserver holds, then what
// the steps change, each replica's owed changes coalesced by a
// replicate.Feed and written by a goroutine of its own. A part's loop
// only marks what its step changed (its table shard's rows) and, at most
// every snapshotEvery, copies its dense blocks into a snapshot a sender
// reads (never written again while one does); a sender copies table rows
// a few hundred at a time under the part's commit lock, as pulls do. No
// loop ever waits on a replica's connection, nor on a sender for longer
// than those few rows.
type Publisher struct {
	log   zerolog.Logger
	mu    sync.Mutex
	parts []*pubPart
	subs  map[*subscriber]struct{}
	nsubs atomic.Int32
	// attached is closed once Serve gave the parts, ended once the job
	// ended (every part's last step marked).
	attached, ended chan struct{}
	endOnce         sync.Once
	senders         sync.WaitGroup
	refused         string // why the pserver cannot publish ("": it can)
	start           int64  // the step the parts held when attached
	tableRows       []int  // rows of each table shard, by index
}

// NewPublisher is a pserver's publisher; Serve attaches its parts.
func NewPublisher(log zerolog.Logger) *Publisher {
	return &Publisher{log: log, subs: map[*subscriber]struct{}{}, attached: make(chan struct{}), ended: make(chan struct{})}
}

// pubPart is a part as the publisher sees it: its dense parameters and
// fixed table shards, named as the model names them.
type pubPart struct {
	p      *part
	dense  []pubVar
	tables []pubVar // shard: the part's rows of a fixed table
	// snap is the newest snapshot of the dense blocks, written by the
	// part's loop between two steps (snapshot), read by senders; spare
	// snapshots no sender holds are written again.
	snap  atomic.Pointer[denseSnap]
	spare []*denseSnap
	taken time.Time // when the loop took the newest
}

// denseSnap is a part's dense blocks at one step, in pubPart.dense's
// order; immutable once published.
type denseSnap struct {
	step int64
	vals [][]float32
	refs atomic.Int32
}

// pubVar is a parameter (or a block of one, or a table's shard) of a
// part: rows first + i*stride of the model's variable name, width values
// each.
type pubVar struct {
	t             *tensor.Tensor
	name          string
	first, stride int64
	width         int
	grad          *tensor.Tensor // a shard's step gradient, whose rows are the rows the step changed
	index         int            // a shard's table index in the feeds
}

// subscriber is one replica's subscription.
type subscriber struct {
	id   transport.NodeID
	feed *replicate.Feed
	wake chan struct{}
	buf  []float32
	ids  []int64
}

// attach gives the publisher the pserver's parts (Serve, before their
// loops start), which hold step start (their initial or restored values).
func (pub *Publisher) attach(parts []*part, start int64) {
	if pub == nil {
		return
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	pub.start = start
	tables := 0
	for _, p := range parts {
		pp := &pubPart{p: p}
		shards := map[string]bool{}
		for _, op := range p.prog.Graph.Ops {
			switch op.Type {
			case "serve_rows", "serve_tables":
				for _, in := range op.Inputs {
					shards[in] = true
				}
			case "dyn_serve":
				pub.refused = "the job has dynamic tables, which a replica cannot follow yet"
			}
		}
		for _, name := range p.prog.Graph.Order {
			v := p.prog.Graph.Vars[name]
			if v.Kind != dsl.KindParam {
				continue
			}
			pv := varOf(name, v, p.prog.Scope[name])
			if shards[name] {
				g := p.prog.Scope[ops.GradName(name)]
				if g == nil || g.Rows == nil {
					pub.refused = fmt.Sprintf("the step's rows of table shard %s are not known (no row gradient %s)", name, ops.GradName(name))
					continue
				}
				pv.grad, pv.index = g, tables
				tables++
				pub.tableRows = append(pub.tableRows, pv.t.Shape[0])
				pp.tables = append(pp.tables, pv)
			} else if pv.t != nil {
				pp.dense = append(pp.dense, pv)
			}
		}
		pp.snapshot(start)
		pub.parts = append(pub.parts, pp)
	}
	close(pub.attached)
}

// snapshotEvery is how often a part's loop copies its dense blocks for
// the senders: twice per DeltaInterval, so a delta's blocks are at most
// this old.
const snapshotEvery = DeltaInterval / 2

// snapshot publishes the part's dense blocks at step k (on its loop,
// between two steps, or before the loop runs or after it ended).
func (pp *pubPart) snapshot(k int64) {
	if len(pp.dense) == 0 {
		return
	}
	var s *denseSnap
	for i, sp := range pp.spare {
		if sp.refs.Load() == 0 && sp != pp.snap.Load() {
			s = sp
			pp.spare = append(pp.spare[:i], pp.spare[i+1:]...)
			break
		}
	}
	if s == nil {
		s = &denseSnap{vals: make([][]float32, len(pp.dense))}
		for j, dv := range pp.dense {
			s.vals[j] = make([]float32, len(dv.t.F))
		}
	}
	s.step = k
	for j, dv := range pp.dense {
		copy(s.vals[j], dv.t.F)
	}
	if old := pp.snap.Swap(s); old != nil {
		pp.spare = append(pp.spare, old)
	}
	pp.taken = time.Now()
}

// acquire is the part's newest snapshot, held until released.
func (pp *pubPart) acquire() *denseSnap {
	for {
		s := pp.snap.Load()
		s.refs.Add(1)
		if pp.snap.Load() == s {
			return s // still the newest: the loop writes only spares no one holds
		}
		s.refs.Add(-1)
	}
}

// varOf is a parameter's place in the model's variable.
func varOf(name string, v *dsl.Var, t *tensor.Tensor) pubVar {
	pv := pubVar{t: t, name: name, stride: 1}
	shape := v.Shape
	if b := v.Block; b != nil {
		pv.name, pv.first, pv.stride, shape = b.Of, int64(b.Start), int64(b.Step()), b.Shape
	}
	pv.width = 1
	if len(shape) > 1 {
		pv.width = shape[1:].Numel()
	}
	return pv
}

// applied marks what part i's step (reaching step k) changed, for every
// subscriber; nothing without one.
func (pub *Publisher) applied(i int, k int64) {
	if pub == nil || pub.nsubs.Load() == 0 {
		return
	}
	pp := pub.parts[i]
	if len(pp.dense) > 0 && time.Since(pp.taken) >= snapshotEvery {
		pp.snapshot(k)
	}
	pub.mu.Lock()
	for s := range pub.subs {
		s.feed.Applied(k)
		if len(pp.dense) > 0 {
			s.feed.Block(i)
		}
		for _, tb := range pp.tables {
			s.feed.Rows(tb.index, tb.grad.Rows.IDs)
		}
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	pub.mu.Unlock()
}

// end marks the job's end: the senders write what is owed, then tell
// their replicas the job finished, and end is waited for that (at most
// timeout).
func (pub *Publisher) end(timeout time.Duration) {
	if pub == nil {
		return
	}
	pub.mu.Lock() // no sender registers after this (Handle checks ended under it)
	pub.endOnce.Do(func() {
		for _, pp := range pub.parts { // the loops ended: their last step
			pp.p.applied.mu.Lock()
			k := pp.p.applied.reached
			pp.p.applied.mu.Unlock()
			pp.snapshot(k)
		}
		close(pub.ended)
	})
	pub.mu.Unlock()
	if timeout <= 0 {
		return
	}
	done := make(chan struct{})
	go func() { pub.senders.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		pub.log.Warn().Dur("after", timeout).Msg("a replica did not take the job's last step in time")
	}
}

// Handle serves one replica's connection (transport.Config.Replicas): its
// subscribe request, then a full state and the deltas, until the
// connection fails or the job ends.
func (pub *Publisher) Handle(id transport.NodeID, inc uint64, c net.Conn) {
	defer c.Close()
	log := pub.log.With().Str("replica", id.String()).Logger()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := replicate.ReadHello(c); err != nil {
		log.Warn().Err(err).Msg("refused a replica")
		return
	}
	c.SetReadDeadline(time.Time{})
	select {
	case <-pub.attached:
	case <-pub.ended:
		return
	}
	if pub.refused != "" {
		log.Warn().Msg("refused a replica: " + pub.refused)
		return
	}
	s := &subscriber{id: id, wake: make(chan struct{}, 1)}
	pub.mu.Lock()
	select {
	case <-pub.ended:
		pub.mu.Unlock()
		return
	default:
	}
	pub.senders.Add(1)
	defer pub.senders.Done()
	step := int64(-1)
	for _, pp := range pub.parts {
		pp.p.applied.mu.Lock()
		if r := pp.p.applied.reached; step < 0 || r < step {
			step = r
		}
		pp.p.applied.mu.Unlock()
	}
	step = max(step, pub.start) // before the loops run, their parts hold step start
	s.feed = replicate.NewFeed(step, pub.tableRows)
	pub.subs[s] = struct{}{}
	pub.nsubs.Add(1)
	pub.mu.Unlock()
	defer func() {
		pub.mu.Lock()
		delete(pub.subs, s)
		pub.nsubs.Add(-1)
		pub.mu.Unlock()
	}()
	log.Info().Int64("step", step).Msg("a replica subscribed")
	w := replicate.NewWriter(c)
	for ended := false; ; {
		pub.mu.Lock()
		d, ok := s.feed.Take()
		pub.mu.Unlock()
		if ok {
			c.SetWriteDeadline(time.Now().Add(60 * time.Second))
			if err := pub.send(w, s, d); err != nil {
				if !errors.Is(err, net.ErrClosed) {
					log.Info().Err(err).Msg("a replica's subscription ended")
				}
				return
			}
		}
		if ended {
			w.Finished()
			return
		}
		if ok { // the steps meanwhile coalesce into the next delta
			select {
			case <-time.After(DeltaInterval):
			case <-pub.ended:
				ended = true
				continue
			}
		}
		select {
		case <-s.wake:
		case <-pub.ended:
			ended = true // what the last steps marked is taken next
		}
	}
}

// DeltaInterval is the least time between two deltas to one replica: the
// steps in between coalesce into one delta (each block and row once, at
// its newest value), which bounds what following costs the pserver and
// the replica whatever the job's steps/s, for at most this much more
// staleness.
const DeltaInterval = 250 * time.Millisecond

// send writes delta d: the current values of what it names.
func (pub *Publisher) send(w *replicate.Writer, s *subscriber, d replicate.Delta) error {
	if err := w.Begin(d.Step, d.Full); err != nil {
		return err
	}
	for i, pp := range pub.parts {
		if (d.Full || slices.Contains(d.Blocks, i)) && len(pp.dense) > 0 {
			snap := pp.acquire()
			for j, dv := range pp.dense {
				if err := w.Rows(replicate.Rows{Name: dv.name, First: dv.first, Stride: dv.stride, Width: dv.width, Values: snap.vals[j]}); err != nil {
					snap.refs.Add(-1)
					return err
				}
			}
			snap.refs.Add(-1)
		}
		for _, tb := range pp.tables {
			if err := pub.sendRows(w, s, pp, tb, d); err != nil {
				return err
			}
		}
	}
	return w.End()
}

// sendRows writes a table shard's rows d names (all of them if Full),
// each copied whole under the part's commit lock.
func (pub *Publisher) sendRows(w *replicate.Writer, s *subscriber, pp *pubPart, tb pubVar, d replicate.Delta) error {
	wd, n := tb.width, tb.t.Shape[0]
	if d.Full {
		const chunk = 1 << 9 // rows a hold of the commit lock copies
		for lo := 0; lo < n; lo += chunk {
			hi := min(n, lo+chunk)
			pp.p.commit.RLock()
			s.buf = append(s.buf[:0], tb.t.F[lo*wd:hi*wd]...)
			pp.p.commit.RUnlock()
			if err := w.Rows(replicate.Rows{Name: tb.name, First: tb.first + int64(lo)*tb.stride, Stride: tb.stride, Width: wd, Values: s.buf}); err != nil {
				return err
			}
		}
		return nil
	}
	local := d.Rows[tb.index]
	if len(local) == 0 {
		return nil
	}
	s.buf, s.ids = s.buf[:0], s.ids[:0]
	for lo := 0; lo < len(local); lo += 1 << 9 { // a few hundred rows a hold of the commit lock
		pp.p.commit.RLock()
		for _, id := range local[lo:min(len(local), lo+1<<9)] {
			s.buf = append(s.buf, tb.t.F[int(id)*wd:int(id+1)*wd]...)
		}
		pp.p.commit.RUnlock()
	}
	for _, id := range local {
		s.ids = append(s.ids, tb.first+id*tb.stride)
	}
	return w.Rows(replicate.Rows{Name: tb.name, IDs: s.ids, Width: wd, Values: s.buf})
}
