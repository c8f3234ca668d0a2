package comm

// NetComm's transfers of varying length: a sharded table's ids, rows and
// row gradients (fetch_rows, send_rows, serve_rows, accumulate_rows).

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/transport"
)

// SendBytes queues a payload of varying length (a sharded table's ids,
// rows or row gradient) for peer. A trainer remembers what it sent each
// pserver, as for a gradient, to re-send it to a restarted one.
func (c *NetComm) SendBytes(ctx context.Context, step int64, p ir.Node, v string, wt ir.DType, payload []byte) error {
	return c.send(ctx, p, step, v, wt, payload)
}

// RecvBytes receives a payload of varying length from peer into the front
// of dst (an AtMost transfer) and returns its length. A trainer lost
// meanwhile gets TrainerTimeout to come back, as for a gradient; a
// pserver lost or restarted is waited for and brought up to date, as for
// a parameter (recvFromPServer).
func (c *NetComm) RecvBytes(ctx context.Context, step int64, p ir.Node, v string, dst []byte) (int, error) {
	sink := prefixPool.Get().(*transport.Prefix)
	defer prefixPool.Put(sink)
	sink.Buf, sink.N = dst, 0
	if p.Role == ir.PServerRole && c.links != nil && c.PServerTimeout > 0 {
		if err := c.recvFromPServer(ctx, p, step, v, nil, sink); err != nil {
			return 0, err
		}
		return sink.N, nil
	}
	for {
		if err := c.tableTrainerRestarted(p, step, v); err != nil {
			return 0, err
		}
		restarted, err := c.recvUntilRestart(ctx, p, step, v, sink)
		if err == nil {
			return sink.N, nil
		}
		if restarted { // check again whether it was p
			sink.N = 0
			continue
		}
		var pe *transport.PeerError
		if p.Role != ir.TrainerRole || c.TrainerTimeout <= 0 || !lostPeer(err) || !errors.As(err, &pe) || ctx.Err() != nil {
			return 0, err
		}
		if werr := c.awaitPeer(ctx, pe.Peer, step, err); werr != nil {
			return 0, werr
		}
	}
}

// recvUntilRestart is RecvSink from p, which on a sync pserver serving a
// table (c.started set) also ends when any peer restarts (restarted
// true): a restart does not fail a receive waiting for the old process,
// and the shard must notice that p came back (tableTrainerRestarted).
func (c *NetComm) recvUntilRestart(ctx context.Context, p ir.Node, step int64, v string, sink transport.Sink) (restarted bool, err error) {
	if p.Role != ir.TrainerRole || c.Async || c.started == nil {
		return false, c.EP.RecvSink(ctx, p, step, v, sink)
	}
	w, rc := c.watched(ctx)
	err = c.EP.RecvSink(w, p, step, v, sink)
	return err != nil && rc.Err() != nil && ctx.Err() == nil, err
}

// tableTrainerRestarted fails a sync pserver's receive of a table's
// request or row gradient from trainer p once p came back as a new
// process: a sync shard serves and updates every trainer at every step,
// and a restarted trainer joins at a step its dense parameters say, which
// the shard's step need not be, so it would wait forever (async shards
// take whatever comes, from any trainer).
func (c *NetComm) tableTrainerRestarted(p ir.Node, step int64, v string) error {
	if p.Role != ir.TrainerRole || c.Async || c.started == nil || p.Index >= len(c.started) {
		return nil
	}
	if n, _ := c.EP.Restarts(p); n != c.started[p.Index] {
		return fmt.Errorf("trainer-%d restarted (a new process) while this pserver waited for its %s of step %d; a sync job with lookup tables cannot take a restarted trainer yet: stop the job and rerun it from its checkpoints (psgraph train --checkpoint-dir)", p.Index, v, step)
	}
	return nil
}

// RecvAnyBytes receives the next payload of v from any trainer.
func (c *NetComm) RecvAnyBytes(ctx context.Context, v string, dst []byte) (int, int, int64, error) {
	sink := prefixPool.Get().(*transport.Prefix)
	defer prefixPool.Put(sink)
	sink.Buf, sink.N = dst, 0
	k, err := c.recvAny(ctx, v, nil, sink)
	if err != nil {
		return 0, 0, 0, err
	}
	return sink.N, k.Src.Index, k.Step, nil
}

// Pending waits until one of the transfers vs has a message from any
// trainer and returns its name. A trainer lost meanwhile gets
// TrainerTimeout to come back, as for a gradient.
func (c *NetComm) Pending(ctx context.Context, vs []string) (string, error) {
	for {
		v, err := c.EP.Pending(ctx, vs)
		var pe *transport.PeerError
		if err == nil || c.TrainerTimeout <= 0 || !lostPeer(err) || !errors.As(err, &pe) || ctx.Err() != nil {
			return v, err
		}
		if werr := c.awaitPeer(ctx, pe.Peer, -1, err); werr != nil {
			return "", werr
		}
	}
}

var prefixPool = sync.Pool{New: func() any { return new(transport.Prefix) }}
