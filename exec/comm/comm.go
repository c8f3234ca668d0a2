package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/blas"
	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/transport"
)

// NetComm is the Comm of one node of a job, over a transport endpoint.
// Transfers are looked up once per op (the attrs map is the op's own), so a
// steady-state step costs no allocation here.
type NetComm struct {
	EP       transport.Endpoint
	Trainers int
	// Async: a pserver applies each gradient piece as it arrives and
	// replies to the trainer it came from.
	Async bool
	// Peers are told Done by Finish: a trainer's pservers, a pserver's trainers.
	Peers []transport.NodeID
	// TrainerTimeout is how long a pserver waits for a lost trainer to
	// come back before the job fails (0: fail at once).
	TrainerTimeout time.Duration
	// PServerTimeout is how long a trainer waits for a lost pserver to
	// come back, the same process or a restarted one (0: fail at once).
	PServerTimeout time.Duration
	Log            zerolog.Logger

	// links: a trainer's memory of its pservers (restart.go)
	links *links

	// restart watch (pservers waiting for lost trainers, trainers for
	// restarted pservers)
	watchOnce sync.Once
	rmu       sync.Mutex
	rctx      context.Context
	rcancel   context.CancelFunc
	// restarted counts the restarts the watchers saw (any peer), bumped
	// before the restart context is cancelled.
	restarted atomic.Int64
	// the receive contexts of the current restart epoch, by their
	// parent (watched)
	wmu     sync.Mutex
	watches map[context.Context]watch
	// started: a pserver's count of each trainer's restarts when it
	// started serving (startServing), read-only after.
	started []int64

	mu      sync.Mutex
	routes  map[string]map[string]*route // by op kind ("to", "from", "accumulate"), then transfer name
	source  map[string]transport.Key
	scratch map[string][]byte
}

type route struct {
	peers   []transport.NodeID // fixed destinations or sources
	all     bool               // to: trainer
	offset  int64
	replyTo string
}

// NewNetComm returns the Comm of a node with this endpoint in a job of n trainers.
func NewNetComm(ep transport.Endpoint, trainers int, async bool, peers []transport.NodeID) *NetComm {
	return &NetComm{EP: ep, Trainers: max(trainers, 1), Async: async, Peers: peers,
		routes: map[string]map[string]*route{}, source: map[string]transport.Key{}, scratch: map[string][]byte{}}
}

func (c *NetComm) routeOf(a ops.Attrs, key string) (*route, error) {
	v := a.String("var")
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.routes[key][v]; ok {
		return r, nil
	}
	r := &route{offset: int64(a.Int("step_offset")), replyTo: a.String("reply_to")}
	if key != "accumulate" {
		p, err := ir.ParseAttr(a.String(key))
		if err != nil {
			return nil, err
		}
		if p.Index >= 0 {
			r.peers = []transport.NodeID{p}
		} else {
			r.all = true
		}
	}
	if r.all || key == "accumulate" {
		for i := 0; i < c.Trainers; i++ {
			r.peers = append(r.peers, transport.Trainer(i))
		}
	}
	if c.routes[key] == nil {
		c.routes[key] = map[string]*route{}
	}
	c.routes[key][v] = r
	return r, nil
}

func DTypeOf(t *tensor.Tensor) transport.DType { return transport.DType(t.DType) }

func (c *NetComm) Send(ctx context.Context, step int64, a ops.Attrs, t *tensor.Tensor) error {
	r, err := c.routeOf(a, "to")
	if err != nil {
		return err
	}
	v := a.String("var")
	if r.all && c.Async && r.replyTo != "" {
		c.mu.Lock()
		k, ok := c.source[r.replyTo]
		c.mu.Unlock()
		if !ok {
			return fmt.Errorf("send %s: reply_to %q names no accumulate that ran this step", v, r.replyTo)
		}
		return c.EP.Send(ctx, k.Src, k.Step+r.offset, v, DTypeOf(t), t.Bytes())
	}
	for _, p := range r.peers {
		if err := c.send(ctx, p, step+r.offset, v, DTypeOf(t), t.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

func (c *NetComm) Recv(ctx context.Context, step int64, a ops.Attrs, t *tensor.Tensor) error {
	r, err := c.routeOf(a, "from")
	if err != nil {
		return err
	}
	if r.all {
		return fmt.Errorf("recv %s: from must name one node", a.String("var"))
	}
	if c.links != nil && c.PServerTimeout > 0 {
		return c.recvFromPServer(ctx, r.peers[0], step, a.String("var"), t.Bytes(), nil)
	}
	return c.EP.Recv(ctx, r.peers[0], step, a.String("var"), t.Bytes())
}

// Accumulate gathers n pieces of a transfer and writes their mean into t.
// When n is the trainer count, one piece comes from each trainer for this
// step and they are summed in trainer order, so the result is
// deterministic; otherwise (async, or a min_count below N) the first n
// pieces to arrive from anyone are taken and the source of the last one is
// remembered for the reply.
func (c *NetComm) Accumulate(ctx context.Context, step int64, a ops.Attrs, n int, t *tensor.Tensor) error {
	r, err := c.routeOf(a, "accumulate")
	if err != nil {
		return err
	}
	v := a.String("var")
	dst := t.Bytes()
	c.mu.Lock()
	buf := c.scratch[v]
	if n > 1 && len(buf) != len(dst) {
		buf = make([]byte, len(dst))
		c.scratch[v] = buf
	}
	c.mu.Unlock()
	tmp := tensor.Tensor{DType: tensor.F32, Shape: t.Shape, F: tensor.F32View(buf)}
	ordered := n == c.Trainers && !c.Async
	for i := 0; i < n; i++ {
		into := dst
		if i > 0 {
			into = buf
		}
		if ordered {
			if pt := partOf(ctx); pt != nil && c.TrainerTimeout > 0 {
				err = c.recvRejoin(ctx, pt, r.peers, r.peers[i], step, v, into, nil)
			} else {
				err = c.EP.Recv(ctx, r.peers[i], step, v, into)
			}
		} else {
			var k transport.Key
			k, err = c.recvAny(ctx, v, into, nil)
			if err == nil {
				c.mu.Lock()
				c.source[v] = k
				c.mu.Unlock()
			}
		}
		if err != nil {
			return err
		}
		if i > 0 {
			blas.Add(t.F, tmp.F, t.F)
		}
	}
	if n > 1 {
		blas.Scale(1/float32(n), 0, t.F, t.F)
	}
	return nil
}

// AccumulateSink is Accumulate of a single piece (n = 1), handed to sink
// as it arrives instead of copied into a tensor: a pserver applies a large
// gradient chunk by chunk (Streamer). A connection lost in the middle is
// resumed into the same sink from the byte it stopped at.
func (c *NetComm) AccumulateSink(ctx context.Context, step int64, a ops.Attrs, sink transport.Sink) error {
	r, err := c.routeOf(a, "accumulate")
	if err != nil {
		return err
	}
	v := a.String("var")
	if c.Trainers == 1 && !c.Async {
		if pt := partOf(ctx); pt != nil && c.TrainerTimeout > 0 {
			return c.recvRejoin(ctx, pt, r.peers, r.peers[0], step, v, nil, sink)
		}
		return c.EP.RecvSink(ctx, r.peers[0], step, v, sink)
	}
	k, err := c.recvAny(ctx, v, nil, sink)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.source[v] = k
	c.mu.Unlock()
	return nil
}

// recvAny receives the next piece of v from any trainer into dst (or
// sink). A trainer lost meanwhile (its connection, or the process) gets
// TrainerTimeout to come back, as in sync mode; a piece its connection
// cut off part-way is then taken up where it stopped, from that trainer,
// so the receiver never mixes two pieces.
func (c *NetComm) recvAny(ctx context.Context, v string, dst []byte, sink transport.Sink) (transport.Key, error) {
	var k transport.Key
	for {
		var err error
		switch {
		case k.Var == "" && sink != nil: // nothing taken yet: any trainer's piece will do
			k, err = c.EP.RecvAnySink(ctx, v, sink)
		case k.Var == "":
			k, err = c.EP.RecvAny(ctx, v, dst)
		case sink != nil: // the rest of the piece k
			err = c.EP.RecvSink(ctx, k.Src, k.Step, v, sink)
		default:
			err = c.EP.Recv(ctx, k.Src, k.Step, v, dst)
		}
		if err == nil {
			return k, nil
		}
		var pe *transport.PeerError
		if c.TrainerTimeout <= 0 || !lostPeer(err) || !errors.As(err, &pe) || ctx.Err() != nil {
			return k, err
		}
		if werr := c.awaitPeer(ctx, pe.Peer, -1, err); werr != nil {
			return k, werr
		}
	}
}

// Flush waits until every tensor handed to Send was written, so its
// memory may be overwritten. On a pserver that waits for lost trainers
// (TrainerTimeout > 0), a trainer lost with messages queued for it gets
// that long to come back; the messages are then written (the same
// process) or dropped (a restarted one). A trainer (PServerTimeout > 0)
// waits for a lost pserver the same way, and brings a restarted one up to
// date.
func (c *NetComm) Flush(ctx context.Context) error {
	for {
		err := c.EP.Flush(ctx)
		var pe *transport.PeerError
		if !lostPeer(err) || !errors.As(err, &pe) {
			return err
		}
		switch r := pe.Peer.Role; {
		case r == ir.TrainerRole && c.TrainerTimeout > 0:
			err = c.awaitPeer(ctx, pe.Peer, -1, err)
		case r == ir.PServerRole && c.PServerTimeout > 0 && c.links != nil:
			err = c.flushLostPServer(ctx, pe.Peer, err)
		}
		if err != nil {
			return err
		}
	}
}

// Traffic reports what the node's endpoint moved so far (Summary,
// ServeSummary).
func (c *NetComm) Traffic() transport.Traffic { return c.EP.Traffic() }

// finished reports whether err means the peers ended the job normally.
func Finished(err error) bool {
	return errors.Is(err, transport.ErrPeerDone) || errors.Is(err, transport.ErrAllDone)
}

// abortWait bounds how long a failing node tries to tell its peers why.
const abortWait = 5 * time.Second

// StopJob tells every peer that this node stops the job because of err
// (their Recvs from it then fail with that reason instead of waiting for
// it to come back) and returns err. A peer that is itself gone is skipped;
// closing the endpoint writes the aborts to the peers still connected.
func (c *NetComm) StopJob(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), abortWait)
	defer cancel()
	reason := err.Error()
	for _, p := range c.Peers {
		if aerr := c.EP.Abort(ctx, p, reason); aerr != nil {
			c.Log.Debug().Str("peer", p.String()).Err(aerr).Msg("could not tell the peer the job stops")
		}
	}
	return err
}

// Specs lists what a node's graph receives (its transfer table's
// receiving ends, one per name), for transport.Endpoint.Accept.
func Specs(g *dsl.Graph, batch int) ([]transport.Spec, error) {
	ts, err := g.Transfers(batch, nil)
	if err != nil {
		return nil, err
	}
	var specs []transport.Spec
	for _, t := range dsl.Received(ts) {
		specs = append(specs, transport.Spec{Var: t.Var, DType: t.DType, Bytes: t.Bytes, AtMost: t.AtMost})
	}
	return specs, nil
}

// Finish flushes and tells every peer this node is done.
func (c *NetComm) Finish(ctx context.Context) error {
	flush := c.EP.Flush
	if c.links != nil && c.PServerTimeout > 0 {
		flush = c.Flush // a trainer rides out a pserver lost at the end too
	}
	if err := flush(ctx); err != nil {
		return err
	}
	for _, p := range c.Peers {
		if err := c.EP.Done(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// AwaitPeers waits until every peer said Done, so closing this node's
// endpoint cannot look like a failure to a peer that is still finishing.
// A connection lost at this point is only reported: the work is done.
func (c *NetComm) AwaitPeers(ctx context.Context) []error {
	var lost []error
	for _, p := range c.Peers {
		for {
			err := c.EP.WaitDone(ctx, p)
			if err == nil {
				break
			}
			// A blip: what the peer sent before its Done is written again
			// once it is back, so wait for it as a recv would.
			if lostPeer(err) && c.waitBack(ctx, p) == nil {
				continue
			}
			lost = append(lost, err)
			break
		}
	}
	return lost
}
