package comm

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/transport"
)

// A trainer's recv of a parameter already there, plain (a trainer that
// fails at once on a lost pserver) and watched for pserver restarts
// (recvFromPServer): the watch costs a few mutexes, no allocation.
func benchRecv(b *testing.B, timeout time.Duration) {
	t0, p0 := transport.Trainer(0), transport.PServer(0)
	hub := transport.NewHub(nil, t0, p0)
	hub.Endpoint(t0).Accept(transport.Spec{Var: "W", DType: transport.F32, Bytes: 64})
	c := NewNetComm(hub.Endpoint(t0), 1, false, []transport.NodeID{p0})
	c.PServerTimeout = timeout
	c.links = &links{by: map[transport.NodeID]*link{p0: {id: p0, got: map[string]*atomic.Int64{"W": {}}}}}
	a := ops.Attrs{"from": "pserver:0", "var": "W"}
	x := tensor.New(tensor.F32, tensor.Shape{16})
	ctx := context.Background()
	ps := hub.Endpoint(p0)
	payload := make([]byte, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ps.Send(ctx, t0, int64(i), "W", transport.F32, payload)
		if err := c.Recv(ctx, int64(i), a, x); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRecvPlain(b *testing.B)   { benchRecv(b, 0) }
func BenchmarkRecvWatched(b *testing.B) { benchRecv(b, time.Minute) }
