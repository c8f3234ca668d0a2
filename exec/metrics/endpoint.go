package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/psgraph/psgraph/transport"
)

// Endpoint is a transport.Endpoint that counts the payload bytes of every
// message to and from each peer. The counters of the peers are built when
// it is made, so a message costs a map read and an atomic add.
type Endpoint struct {
	transport.Endpoint
	order  []transport.NodeID
	peers  map[transport.NodeID]*peerCounters
	other  *peerCounters // a peer outside the list (never in a well-formed job)
	exact  map[string]int
	cancel context.CancelFunc
	done   sync.WaitGroup
}

type peerCounters struct {
	sent, recv prometheus.Counter
	reconnects prometheus.Counter
}

// watchEvery is how often a watcher looks at a live connection.
const watchEvery = 100 * time.Millisecond

// Endpoint wraps ep, which talks to peers and receives the transfers specs
// (the same the endpoint accepts: they give the size of a message handed
// to a sink). A nil Node returns ep itself. Call Server.Close (or
// StopWatching) to stop the connection watchers.
func (n *Node) Endpoint(ep transport.Endpoint, peers []transport.NodeID, specs []transport.Spec) transport.Endpoint {
	if n == nil {
		return ep
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Endpoint{Endpoint: ep, order: peers, peers: map[transport.NodeID]*peerCounters{}, exact: map[string]int{}, cancel: cancel}
	for _, p := range peers {
		e.peers[p] = &peerCounters{sent: n.sent.WithLabelValues(p.String()), recv: n.recv.WithLabelValues(p.String()),
			reconnects: n.reconnects.WithLabelValues(p.String())}
	}
	e.other = &peerCounters{sent: n.sent.WithLabelValues("other"), recv: n.recv.WithLabelValues("other"),
		reconnects: n.reconnects.WithLabelValues("other")}
	for _, s := range specs {
		if !s.AtMost {
			e.exact[s.Var] = s.Bytes
		}
	}
	n.mu.Lock()
	n.eps = append(n.eps, e)
	n.mu.Unlock()
	for _, p := range peers {
		e.done.Add(1)
		go e.watch(ctx, p)
	}
	return e
}

func (e *Endpoint) of(p transport.NodeID) *peerCounters {
	if c := e.peers[p]; c != nil {
		return c
	}
	return e.other
}

// connected reports whether p has a live connection now.
func (e *Endpoint) connected(p transport.NodeID) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return e.Endpoint.WaitPeer(ctx, p) == nil
}

// watch counts p's reconnections: it waits for p's connection, then looks
// every watchEvery whether it is still up.
func (e *Endpoint) watch(ctx context.Context, p transport.NodeID) {
	defer e.done.Done()
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	lost := false
	for {
		if err := e.Endpoint.WaitPeer(ctx, p); err != nil {
			if ctx.Err() != nil {
				return
			}
			// the endpoint closed or gave p up: look again later
		} else if lost {
			e.of(p).reconnects.Inc()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		lost = !e.connected(p)
	}
}

func (e *Endpoint) stop() {
	e.cancel()
	e.done.Wait()
}

// StopWatching stops the connection watchers (Server.Close does too).
func (e *Endpoint) StopWatching() { e.stop() }

func (e *Endpoint) Send(ctx context.Context, to transport.NodeID, step int64, v string, dt transport.DType, payload []byte) error {
	err := e.Endpoint.Send(ctx, to, step, v, dt, payload)
	if err == nil {
		e.of(to).sent.Add(float64(len(payload)))
	}
	return err
}

func (e *Endpoint) Recv(ctx context.Context, src transport.NodeID, step int64, v string, dst []byte) error {
	err := e.Endpoint.Recv(ctx, src, step, v, dst)
	if err == nil {
		e.of(src).recv.Add(float64(len(dst)))
	}
	return err
}

// sinkBytes is what a completed RecvSink handed to sink: a Prefix knows,
// otherwise the transfer's exact size.
func (e *Endpoint) sinkBytes(v string, sink transport.Sink) int {
	if p, ok := sink.(*transport.Prefix); ok {
		return p.N
	}
	return e.exact[v]
}

func (e *Endpoint) RecvSink(ctx context.Context, src transport.NodeID, step int64, v string, sink transport.Sink) error {
	err := e.Endpoint.RecvSink(ctx, src, step, v, sink)
	if err == nil {
		e.of(src).recv.Add(float64(e.sinkBytes(v, sink)))
	}
	return err
}

func (e *Endpoint) RecvAny(ctx context.Context, v string, dst []byte) (transport.Key, error) {
	k, err := e.Endpoint.RecvAny(ctx, v, dst)
	if err == nil {
		e.of(k.Src).recv.Add(float64(len(dst)))
	}
	return k, err
}

func (e *Endpoint) RecvAnySink(ctx context.Context, v string, sink transport.Sink) (transport.Key, error) {
	k, err := e.Endpoint.RecvAnySink(ctx, v, sink)
	if err == nil {
		e.of(k.Src).recv.Add(float64(e.sinkBytes(v, sink)))
	}
	return k, err
}
