package transport

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A large message still held by the receiver when the connection drops
// right after the sender's Done: the sender is not finished until its
// payload arrived, so the trainer redials and the message is written again.
func TestTCPHeldMessageAfterDoneSurvivesCut(t *testing.T) {
	const elems = 256 << 10 // 1 MiB: held, not read ahead
	ctx := context.Background()
	m, _ := tcpJob(t, nil, t0, p0)
	tr, ps := m[t0], m[p0]
	tr.Accept(Spec{Var: "W", DType: F32, Bytes: 4 * elems})
	payload := ramp(elems)
	must(t, ps.Send(ctx, t0, 1, "W", F32, payload))
	must(t, ps.Done(ctx, t0))
	must(t, ps.Flush(ctx))
	if k, err := tr.Peek(ctx, p0, "W"); err != nil || k != 1 {
		t.Fatalf("peek = %d, %v", k, err)
	}
	waitFor(t, "the Done to arrive", func() bool {
		tr.in.mu.Lock()
		defer tr.in.mu.Unlock()
		return tr.in.peer[p0].doneAt >= 0
	})
	old := conns(tr, ps)
	breakConn(t, tr, p0)
	reconnected(t, tr, ps, old)
	dst := make([]byte, 4*elems)
	must(t, tr.Recv(ctx, p0, 1, "W", dst))
	if !bytes.Equal(dst, payload) {
		t.Fatal("the held message differs after the cut")
	}
	must(t, tr.WaitDone(ctx, p0))
}

// A held message dropped as stale while its decoder is reading into the
// claimer's memory: the recv is answered only once the decoder stopped,
// never while it may still write into dst.
func TestDropWhileDecoderReadsWaitsForIt(t *testing.T) {
	in := newInbox(PServer(0), []NodeID{Trainer(0)}, nil)
	in.eager = 0
	in.accept([]Spec{{Var: "W", DType: F32, Bytes: 8}})
	in.connected(Trainer(0), 1)
	h, err := in.hold(Trainer(0), 1, 3, "W", 8, 0)
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() { got <- in.recv(ctx, Trainer(0), 3, "W", make([]byte, 8), nil) }()
	dead := make(chan struct{})
	if _, ok, err := in.next(h, dead); !ok || err != nil { // the decoder starts reading into dst
		t.Fatalf("next = %v, %v", ok, err)
	}
	in.dropBefore(4)
	in.mu.Lock()
	answered := !h.claimed
	in.mu.Unlock()
	if answered {
		t.Fatal("the drop answered the claim while the decoder was reading into its memory")
	}
	if _, ok, _ := in.next(h, dead); ok { // the decoder's next chunk: it stops and answers
		t.Fatal("the decoder was told to go on reading a dropped message")
	}
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("recv = %v, want the cancellation (its message was dropped)", err)
	}
}

// Closing flushes what is queued to connected peers only: a trainer that
// never connected is not waited for.
func TestTCPCloseSkipsPeersNeverConnected(t *testing.T) {
	cfg := Config{Self: p0, Listen: "127.0.0.1:0", Peers: map[NodeID]string{t0: ""}, Token: []byte("s3cret"), JobHash: "job"}
	ps, err := Listen(context.Background(), cfg)
	must(t, err)
	defer ps.Close()
	must(t, ps.Abort(context.Background(), t0, "stopping"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ps.flush(ctx, true); err != nil {
		t.Fatalf("flush of the connected peers: %v, want nil at once (trainer-0 never connected)", err)
	}
}

// A Sink that gives no room fails its recv; the recv does not hang.
type emptySink struct{}

func (emptySink) Next(int) []byte    { return nil }
func (emptySink) Filled(int, []byte) {}

func TestTCPEmptySinkFailsRecv(t *testing.T) {
	const elems = 256 << 10
	ctx := context.Background()
	m, _ := tcpJob(t, nil, t0, p0)
	tr, ps := m[t0], m[p0]
	ps.Accept(Spec{Var: "W", DType: F32, Bytes: 4 * elems})
	must(t, tr.Send(ctx, p0, 1, "W", F32, ramp(elems)))
	err := ps.RecvSink(ctx, t0, 1, "W", emptySink{})
	if err == nil || !strings.Contains(err.Error(), "empty buffer") {
		t.Fatalf("recv into a sink without room: %v, want an error naming the empty buffer", err)
	}
}
