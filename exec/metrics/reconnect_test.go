package metrics_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/transport"
)

// proxy forwards loopback connections to a backend; cut closes the live
// ones and refuses new ones until open.
type proxy struct {
	ln      net.Listener
	backend string
	mu      sync.Mutex
	conns   []net.Conn
	closed  bool
	opened  chan struct{}
}

func newProxy(t *testing.T, backend string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, backend: backend, opened: make(chan struct{})}
	close(p.opened)
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			closed, opened := p.closed, p.opened
			p.mu.Unlock()
			if closed { // a cut link: the dialer sees its connection drop
				c.Close()
				<-opened
				continue
			}
			b, err := net.Dial("tcp", backend)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, b)
			p.mu.Unlock()
			go func() { io.Copy(b, c); b.Close() }()
			go func() { io.Copy(c, b); c.Close() }()
		}
	}()
	return p
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed, p.opened = true, make(chan struct{})
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) open() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.closed = false
		close(p.opened)
	}
}

// value reads one sample of the node's metric with label peer.
func value(t *testing.T, n *metrics.Node, name, peer string) float64 {
	t.Helper()
	fams, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "peer" && l.GetValue() == peer {
					if m.Gauge != nil {
						return m.Gauge.GetValue()
					}
					return m.Counter.GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{peer=%q}", name, peer)
	return 0
}

// waitFor polls cond until it holds, or fails after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReconnectCounted: a trainer whose link to its pserver is cut for
// half a second (five watch intervals) reports the connection down, then
// up again with one reconnect, and the same process (no restart).
func TestReconnectCounted(t *testing.T) {
	spec := transport.Spec{Var: "g", DType: transport.F32, Bytes: 8}
	ps, err := transport.Listen(context.Background(), transport.Config{Self: transport.PServer(0), Listen: "127.0.0.1:0",
		Peers: map[transport.NodeID]string{transport.Trainer(0): ""}, JobHash: "reconnect", Accept: []transport.Spec{spec}})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	px := newProxy(t, ps.Addr().String())
	tr, err := transport.Dial(context.Background(), transport.Config{Self: transport.Trainer(0), Peers: map[transport.NodeID]string{transport.PServer(0): px.ln.Addr().String()},
		JobHash: "reconnect", ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	n := metrics.New("trainer-0")
	ep := n.Endpoint(tr, []transport.NodeID{transport.PServer(0)}, nil).(*metrics.Endpoint)
	defer ep.StopWatching()
	if value(t, n, "psgraph_peer_connected", "pserver-0") != 1 || value(t, n, "psgraph_peer_reconnects_total", "pserver-0") != 0 {
		t.Fatal("a dialed trainer is not connected, or counts a reconnect")
	}
	ctx := context.Background()
	if err := ep.Send(ctx, transport.PServer(0), 0, "g", transport.F32, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	if err := ps.Recv(ctx, transport.Trainer(0), 0, "g", got); err != nil {
		t.Fatal(err)
	}
	if v := value(t, n, "psgraph_peer_sent_bytes_total", "pserver-0"); v != 8 {
		t.Errorf("sent %v bytes to pserver-0, want 8", v)
	}
	px.cut()
	waitFor(t, "the trainer seeing its connection down", func() bool { return value(t, n, "psgraph_peer_connected", "pserver-0") == 0 })
	time.Sleep(5 * 100 * time.Millisecond) // the fault: the link stays cut for five watch intervals
	px.open()
	waitFor(t, "one reconnect counted", func() bool { return value(t, n, "psgraph_peer_reconnects_total", "pserver-0") == 1 })
	if value(t, n, "psgraph_peer_connected", "pserver-0") != 1 || value(t, n, "psgraph_peer_restarts_total", "pserver-0") != 0 {
		t.Error("after the reconnect the trainer is not connected, or counts a restart of the same process")
	}
}
