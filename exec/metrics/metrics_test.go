package metrics_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/transport"
)

// TestNilNode: without --metrics-addr the executor calls a nil Node, which
// does nothing and leaves the endpoint unwrapped.
func TestNilNode(t *testing.T) {
	var n *metrics.Node
	n.Step(time.Millisecond)
	n.ServedStep()
	n.Update(time.Millisecond)
	n.Checkpointed(1, time.Now())
	n.SetReady(true)
	hub := transport.NewHub(nil, transport.Trainer(0), transport.PServer(0))
	ep := hub.Endpoint(transport.Trainer(0))
	if got := n.Endpoint(ep, nil, nil); got != ep {
		t.Errorf("a nil Node wrapped the endpoint: %T", got)
	}
	var s *metrics.Server
	if s.Node() != nil || s.Close() != nil {
		t.Error("a nil Server has a Node or fails to close")
	}
}

// TestListenBusyAddr: a taken --metrics-addr fails naming the flag and the
// way out.
func TestListenBusyAddr(t *testing.T) {
	s, err := metrics.Listen("127.0.0.1:0", metrics.New("local"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = metrics.Listen(s.Addr().String(), metrics.New("local"))
	if err == nil {
		t.Fatal("listening twice on one address succeeded")
	}
	for _, want := range []string{"--metrics-addr " + s.Addr().String(), "pick a free port"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	resp, err := http.Get("http://" + s.Addr().String() + metrics.LivePath)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("liveness: %v %v", resp, err)
	}
	resp.Body.Close()
}

// BenchmarkStep is what a trainer's step pays for metrics: the counter and
// the histogram (the executor adds one time.Now).
func BenchmarkStep(b *testing.B) {
	n := metrics.New("trainer-0")
	b.ReportAllocs()
	for range b.N {
		n.Step(3 * time.Millisecond)
	}
}

// BenchmarkSend is what a message pays: the wrapped Send of an in-memory
// endpoint against the bare one (BenchmarkSendBare).
func BenchmarkSend(b *testing.B)     { benchSend(b, true) }
func BenchmarkSendBare(b *testing.B) { benchSend(b, false) }

func benchSend(b *testing.B, wrapped bool) {
	hub := transport.NewHub(nil, transport.Trainer(0), transport.PServer(0))
	var ep transport.Endpoint = hub.Endpoint(transport.Trainer(0))
	recv := hub.Endpoint(transport.PServer(0))
	recv.Accept(transport.Spec{Var: "g", DType: transport.F32, Bytes: 64})
	if wrapped {
		n := metrics.New("trainer-0")
		ep = n.Endpoint(ep, []transport.NodeID{transport.PServer(0)}, nil)
		defer ep.(*metrics.Endpoint).StopWatching()
	}
	ctx := context.Background()
	payload, dst := make([]byte, 64), make([]byte, 64)
	b.ReportAllocs()
	for i := range b.N {
		if err := ep.Send(ctx, transport.PServer(0), int64(i), "g", transport.F32, payload); err != nil {
			b.Fatal(err)
		}
		if err := recv.Recv(ctx, transport.Trainer(0), int64(i), "g", dst); err != nil {
			b.Fatal(err)
		}
	}
}
