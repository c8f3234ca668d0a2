package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/transport"
)

// Config is what a node's communication needs, whatever its role.
type Config struct {
	EP       transport.Endpoint
	Trainers int
	Async    bool
	// Transfers is the node's transfer table (dsl.Graph.Transfers): its
	// communication reads the transfers of varying length (a table's ids,
	// rows and row gradients) by prefix.
	Transfers []dsl.Transfer
	// Timeout is how long a lost peer gets to come back, the same process
	// after a network fault or a new one (0: the job fails at once). A
	// trainer waits this long for a pserver, a pserver for a trainer.
	Timeout time.Duration
	Log     zerolog.Logger
}

// node is what both roles share: the endpoint, the job's shape, which
// transfers vary in length, and the watch over the peers' restarts.
type node struct {
	ep       transport.Endpoint
	trainers int
	async    bool
	peers    []transport.NodeID // a trainer's pservers, a pserver's trainers
	timeout  time.Duration
	log      zerolog.Logger
	atMost   map[string]bool
	watch    *watch
	// transfers is the node's transfer table (Config.Transfers).
	transfers []dsl.Transfer
}

func newNode(cfg Config, peers []transport.NodeID) node {
	n := node{ep: cfg.EP, trainers: max(cfg.Trainers, 1), async: cfg.Async, peers: peers, timeout: cfg.Timeout, log: cfg.Log,
		atMost: map[string]bool{}, transfers: cfg.Transfers}
	for _, t := range cfg.Transfers {
		if t.AtMost {
			n.atMost[t.Var] = true
		}
	}
	n.watch = newWatch(cfg.EP, peers)
	return n
}

// Close stops the node's watch over its peers' restarts.
func (c *node) Close() { c.watch.close() }

// Trainers is the job's trainer count; Async whether the job is async.
func (c *node) Trainers() int { return c.trainers }
func (c *node) Async() bool   { return c.async }

// Endpoint is the node's transport endpoint.
func (c *node) Endpoint() transport.Endpoint { return c.ep }

// Traffic reports what the node's endpoint moved so far.
func (c *node) Traffic() transport.Traffic { return c.ep.Traffic() }

// Finished reports whether err means the peers ended the job normally.
func Finished(err error) bool {
	return errors.Is(err, transport.ErrPeerDone) || errors.Is(err, transport.ErrAllDone)
}

// lostPeer reports whether err is a peer's connection failing (not its
// normal end, nor its stopping the job).
func lostPeer(err error) bool {
	var pe *transport.PeerError
	var ab *transport.Aborted
	return errors.As(err, &pe) && !errors.Is(err, transport.ErrPeerDone) && !errors.Is(err, transport.ErrUnknownPeer) && !errors.As(err, &ab)
}

// connected reports whether the transport has a connection to p now.
func (c *node) connected(p transport.NodeID) bool {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	return c.ep.WaitPeer(done, p) == nil
}

// incarnation is p's incarnation as this node's transport counts it.
func (c *node) incarnation(p transport.NodeID) int64 {
	n, _ := c.ep.Restarts(p)
	return n
}

// abortWait bounds how long a failing node tries to tell its peers why.
const abortWait = 5 * time.Second

// StopJob tells every peer that this node stops the job because of err
// (their receives from it then fail with that reason instead of waiting
// for it to come back) and returns err. A peer that is itself gone is
// skipped; closing the endpoint writes the aborts to the peers still
// connected.
func (c *node) StopJob(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), abortWait)
	defer cancel()
	reason := err.Error()
	for _, p := range c.peers {
		if aerr := c.ep.Abort(ctx, p, reason); aerr != nil {
			c.log.Debug().Str("peer", p.String()).Err(aerr).Msg("could not tell the peer the job stops")
		}
	}
	return err
}

// done tells every peer this node sends nothing more.
func (c *node) done(ctx context.Context) error {
	for _, p := range c.peers {
		if err := c.ep.Done(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// AwaitPeers waits until every peer said Done, so closing this node's
// endpoint cannot look like a failure to a peer that is still finishing.
// A connection lost at this point is only reported: the work is done.
func (c *node) AwaitPeers(ctx context.Context) []error {
	var lost []error
	for _, p := range c.peers {
		for {
			err := c.ep.WaitDone(ctx, p)
			if err == nil {
				break
			}
			// A blip: what the peer sent before its Done is written again
			// once it is back, so wait for it as a receive would.
			if lostPeer(err) && c.waitBack(ctx, p) == nil {
				continue
			}
			lost = append(lost, err)
			break
		}
	}
	return lost
}

// waitBack waits up to the timeout for a lost peer to be connected again.
// It fails at once when the timeout is 0 or ctx ended.
func (c *node) waitBack(ctx context.Context, p transport.NodeID) error {
	if c.timeout <= 0 || ctx.Err() != nil {
		return fmt.Errorf("not waiting for %s", p)
	}
	wctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return c.ep.WaitPeer(wctx, p)
}

// recvInto receives v@step from p into dst, or, for a transfer of varying
// length, into the front of dst through sink; it returns the length.
func (c *node) recvInto(ctx context.Context, p transport.NodeID, step int64, v string, dst []byte, sink *transport.Prefix) (int, error) {
	if sink == nil {
		return len(dst), c.ep.Recv(ctx, p, step, v, dst)
	}
	err := c.ep.RecvSink(ctx, p, step, v, sink)
	return sink.N, err
}

// prefix returns a sink for dst when v varies in length (nil otherwise);
// put it back with release.
func (c *node) prefix(v string, dst []byte) *transport.Prefix {
	if !c.atMost[v] {
		return nil
	}
	sink := prefixPool.Get().(*transport.Prefix)
	sink.Buf, sink.N = dst, 0
	return sink
}

func release(sink *transport.Prefix) {
	if sink != nil {
		sink.Buf = nil
		prefixPool.Put(sink)
	}
}

var prefixPool = sync.Pool{New: func() any { return new(transport.Prefix) }}
