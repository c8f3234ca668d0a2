package comm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/transport"
	"github.com/rs/zerolog"
)

// A trainer that stopped the job is not "lost": when its abort frame
// arrives just after its data stream closed, the pserver waiting for it
// reports the trainer's reason, not a timeout (TestBadBatchStopsTheJob
// hit this under load).
func TestAwaitPeerReportsTheAbortReason(t *testing.T) {
	t0, p0 := transport.Trainer(0), transport.PServer(0)
	hub := transport.NewHub(nil, t0, p0)
	ctx := context.Background()
	if err := hub.Endpoint(t0).Abort(ctx, p0, "bad.csv:200: column 2: \"oops\" is not a number"); err != nil {
		t.Fatal(err)
	}
	hub.Endpoint(t0).Close()
	c := NewNetComm(hub.Endpoint(p0), 1, false, []transport.NodeID{t0})
	c.TrainerTimeout, c.Log = time.Minute, zerolog.Nop()
	err := c.awaitPeer(ctx, t0, 1, fmt.Errorf("%s: connection lost", t0))
	if err == nil || !strings.Contains(err.Error(), "bad.csv:200") || strings.Contains(err.Error(), "did not come back") {
		t.Fatalf("awaitPeer: %v, want the trainer's reason", err)
	}
}

// A sync pserver's receive of a table's ids from a trainer ends at a
// peer's restart, yet it allocates nothing beyond the transport's own
// receive: its restart-watching context is made once per restart
// (watched), not per receive.
func TestTableReceiveDoesNotAllocate(t *testing.T) {
	t0, p0 := transport.Trainer(0), transport.PServer(0)
	hub := transport.NewHub(nil, t0, p0)
	ps, tr := hub.Endpoint(p0), hub.Endpoint(t0)
	ps.Accept(transport.Spec{Var: "T@ids", DType: transport.I32, Bytes: 64, AtMost: true})
	c := NewNetComm(ps, 1, false, []transport.NodeID{t0})
	c.started = []int64{0}
	ctx := context.Background()
	payload, dst := make([]byte, 32), make([]byte, 64)
	sink := &transport.Prefix{Buf: dst}
	var step int64
	send := func() {
		step++
		if err := tr.Send(ctx, p0, step, "T@ids", transport.I32, payload); err != nil {
			t.Fatal(err)
		}
	}
	plain := testing.AllocsPerRun(100, func() {
		send()
		sink.N = 0
		if err := ps.RecvSink(ctx, t0, step, "T@ids", sink); err != nil {
			t.Fatal(err)
		}
	})
	watched := testing.AllocsPerRun(100, func() {
		send()
		if _, err := c.RecvBytes(ctx, step, ir.Trainer(0), "T@ids", dst); err != nil {
			t.Fatal(err)
		}
	})
	if watched > plain {
		t.Fatalf("a table receive allocates %.1f times per step, the transport's alone %.1f", watched, plain)
	}
}
