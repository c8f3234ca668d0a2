package transport

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// A recv waiting for a peer's message reads that peer's connection
// itself (yamux.Session.Lead, third_party/yamux/lead.go): in a run of
// round trips nearly every frame is read by the goroutine that waits for
// it, on both ends, not by yamux's receive loop, which would hand it on
// (a goroutine wake-up, and on an idle core another thread's: docs/wire.md,
// "Reading in the recv").
func TestTCPRecvReadsItsConnection(t *testing.T) {
	m, _ := tcpJob(t, nil, t0, p0)
	tr, ps := m[t0], m[p0]
	ps.Accept(Spec{Var: "g", DType: F32, Bytes: 64})
	tr.Accept(Spec{Var: "w", DType: F32, Bytes: 64})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 400
	errs := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		for i := int64(0); i < n; i++ {
			if err := ps.Recv(ctx, t0, i, "g", buf); err != nil {
				errs <- err
				return
			}
			if err := ps.Send(ctx, t0, i, "w", F32, buf); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	src, dst := make([]byte, 64), make([]byte, 64)
	for i := int64(0); i < n; i++ {
		src[0] = byte(i)
		must(t, tr.Send(ctx, p0, i, "g", F32, src))
		must(t, tr.Recv(ctx, p0, i, "w", dst))
		if dst[0] != byte(i) {
			t.Fatalf("round trip %d came back with %d", i, dst[0])
		}
	}
	must(t, <-errs)
	for _, e := range []struct {
		name string
		ep   *TCP
		peer NodeID
	}{{"trainer", tr, p0}, {"pserver", ps, t0}} {
		led, loop := curConn(e.ep, e.peer).sess.FramesRead()
		t.Logf("%s: %d frames read by recvs, %d by the receive loop", e.name, led, loop)
		if led < n*9/10 {
			t.Errorf("%s: recvs read %d frames of %d round trips, the receive loop %d: want at least 90%% read by the recv waiting for them", e.name, led, n, loop)
		}
	}
}

// Recvs that wait for one peer at once (a pserver's parts, each waiting
// for its block's gradient) share its connection: one reads, the others
// wait for the read token or for their message, which the reader hands
// them. Each round's messages come one frame at a time, in the reverse
// order of the recvs, so most arrive for a recv that waits for the token.
// (A token left with no reader when a waiting recv got its message and
// left stalled the connection until the next keepalive; the chaos test,
// TestTCPChaosLinkResends, caught it as a 10 s stall.)
func TestTCPConcurrentRecvsShareTheConnection(t *testing.T) {
	m, _ := tcpJob(t, nil, t0, p0)
	tr, ps := m[t0], m[p0]
	const parts, rounds = 8, 200
	for i := 0; i < parts; i++ {
		ps.Accept(Spec{Var: fmt.Sprintf("g%d", i), DType: F32, Bytes: 256})
	}
	tr.Accept(Spec{Var: "ack", DType: F32, Bytes: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	payload := make([][]byte, parts)
	for i := range payload {
		payload[i] = make([]byte, 256)
	}
	ack := make([]byte, 4)
	for r := int64(0); r < rounds; r++ {
		var wg sync.WaitGroup
		errs := make([]error, parts)
		for i := 0; i < parts; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 256)
				errs[i] = ps.Recv(ctx, t0, r, fmt.Sprintf("g%d", i), buf)
				if errs[i] == nil && buf[0] != byte(r+int64(i)) {
					errs[i] = fmt.Errorf("part %d of round %d got %d", i, r, buf[0])
				}
			}()
		}
		for i := parts - 1; i >= 0; i-- { // each its own frame
			payload[i][0] = byte(r + int64(i))
			must(t, tr.Send(ctx, p0, r, fmt.Sprintf("g%d", i), F32, payload[i]))
			must(t, tr.Flush(ctx))
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", r, err)
			}
		}
		// The payloads stay unchanged until the pserver had them.
		must(t, ps.Send(ctx, t0, r, "ack", F32, ack))
		must(t, tr.Recv(ctx, p0, r, "ack", ack))
	}
}
