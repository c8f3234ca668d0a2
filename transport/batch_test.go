package transport

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// stamp is a payload of n bytes that names its transfer and step.
func stamp(n int, v string, step int64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(int(step)*31 + i*7 + len(v)*13 + int(v[len(v)-1]))
	}
	return b
}

// Messages queued for a peer before it connects leave in one batch: one
// write of the message stream for 16 messages of 8 transfers, routed on
// the receiver to each transfer and step with its payload, read in at
// most two reads (the peer's resume frame may come in a read of its own).
func TestTCPBatchesQueuedMessages(t *testing.T) {
	ctx := context.Background()
	ps, err := Listen(ctx, Config{Self: p0, Listen: "127.0.0.1:0", Peers: map[NodeID]string{t0: ""}, Token: []byte("s3cret"), JobHash: "job"})
	must(t, err)
	defer ps.Close()
	var specs []Spec
	type msg struct {
		v    string
		step int64
		b    []byte
	}
	var sent []msg
	for i := 0; i < 8; i++ {
		v := fmt.Sprintf("w%d", i)
		n := 4 << i // 4 bytes to 512
		specs = append(specs, Spec{Var: v, DType: F32, Bytes: n})
		for step := int64(0); step < 2; step++ {
			sent = append(sent, msg{v, step, stamp(n, v, step)})
		}
	}
	for _, m := range sent { // the trainer is not connected: they wait in the queue
		must(t, ps.Send(ctx, t0, m.step, m.v, F32, m.b))
	}
	tr, err := Dial(ctx, Config{Self: t0, Peers: map[NodeID]string{p0: ps.Addr().String()}, Token: []byte("s3cret"), JobHash: "job", Accept: specs})
	must(t, err)
	defer tr.Close()
	for i := len(sent) - 2; i >= 0; i -= 2 { // transfers in another order than sent (a step after the one before: Recv drops older ones)
		for _, m := range sent[i : i+2] {
			got := make([]byte, len(m.b))
			must(t, tr.Recv(ctx, p0, m.step, m.v, got))
			if !bytes.Equal(got, m.b) {
				t.Fatalf("%s@%d: got % x, sent % x", m.v, m.step, got, m.b)
			}
		}
	}
	must(t, ps.Flush(ctx))
	if s := ps.Stats(); s.BatchesSent != 1 || s.MsgsSent != int64(len(sent)) {
		t.Fatalf("the pserver wrote %d messages in %d batches, want %d in 1", s.MsgsSent, s.BatchesSent, len(sent))
	}
	if s := tr.Stats(); s.BatchesRecv > 2 || s.MsgsRecv != int64(len(sent)) {
		t.Fatalf("the trainer took %d messages in %d reads, want %d in at most 2", s.MsgsRecv, s.BatchesRecv, len(sent))
	}
}

// A recv waiting when its message arrives gets the payload copied
// straight into its memory: over the message stream, over a bulk stream
// (held: read from the stream into it), and over the in-memory twin, the
// inbox takes no buffer.
func TestRecvWaitingGetsPayloadInPlace(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		eager int // payloads above it go on a bulk stream, held
	}{{"message stream", 0}, {"bulk stream", 100}, {"inmem", 0}} {
		t.Run(c.name, func(t *testing.T) {
			const n = 8
			specs := make([]Spec, n)
			for i := range specs {
				specs[i] = Spec{Var: fmt.Sprintf("g%d", i), DType: F32, Bytes: 256 + 4*i}
			}
			var tr, ps Endpoint
			var in *inbox
			var connect func()
			if c.name == "inmem" {
				h := NewHub(nil, t0, p0)
				tr, ps = h.Endpoint(t0), h.Endpoint(p0)
				in = h.Endpoint(p0).in
				connect = func() {}
			} else {
				l, err := Listen(ctx, Config{Self: p0, Listen: "127.0.0.1:0", Peers: map[NodeID]string{t0: ""}, Accept: specs, EagerBytes: c.eager})
				must(t, err)
				ps, in = l, l.in
				connect = func() {
					d, err := Dial(ctx, Config{Self: t0, Peers: map[NodeID]string{p0: l.Addr().String()}, EagerBytes: c.eager})
					must(t, err)
					tr = d
				}
			}
			defer ps.Close()
			ps.Accept(specs...)
			errs := make(chan error, n)
			got := make([][]byte, n)
			for i, s := range specs {
				got[i] = make([]byte, s.Bytes)
				go func() { errs <- ps.Recv(ctx, t0, 3, s.Var, got[i]) }()
			}
			waitFor(t, "every recv to wait for its message", func() bool {
				in.mu.Lock()
				defer in.mu.Unlock()
				for _, s := range specs {
					if len(in.vars[s.Var].claims) != 1 {
						return false
					}
				}
				return true
			})
			connect()
			defer tr.Close()
			for _, s := range specs {
				must(t, tr.Send(ctx, p0, 3, s.Var, F32, stamp(s.Bytes, s.Var, 3)))
			}
			for range specs {
				must(t, <-errs)
			}
			for i, s := range specs {
				if !bytes.Equal(got[i], stamp(s.Bytes, s.Var, 3)) {
					t.Fatalf("%s arrived changed", s.Var)
				}
			}
			if d, ok := tr.(*TCP); ok {
				must(t, d.Flush(ctx))
				if inline := d.Stats().BatchesSent > 0; inline != (c.eager == 0) {
					t.Fatalf("%d batches on the message stream", d.Stats().BatchesSent)
				}
			}
			in.mu.Lock()
			defer in.mu.Unlock()
			for class, l := range in.free {
				if len(l) > 0 {
					t.Fatalf("the inbox took %d buffers of %d bytes for messages whose recvs waited", len(l), class)
				}
			}
		})
	}
}

// A large message neither blocks small ones nor crosses a buffer: one
// held until its recv comes lets the small messages sent after it
// through, and then goes straight into the recv's memory; one being read
// into a slow sink does too.
func TestTCPSmallMessagesPassLargeOnes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, _ := tcpJob(t, nil, t0, p0)
	tr, ps := m[t0], m[p0]
	const large, small, n = 8 << 20, 64, 10
	ps.Accept(Spec{Var: "L", DType: F32, Bytes: large}, Spec{Var: "g", DType: F32, Bytes: small})
	big := stamp(large, "L", 0)
	must(t, tr.Send(ctx, p0, 0, "L", F32, big))
	for k := int64(0); k < n; k++ {
		must(t, tr.Send(ctx, p0, k, "g", F32, stamp(small, "g", k)))
	}
	got := make([]byte, small)
	for k := int64(0); k < n; k++ { // L@0 is not received yet
		must(t, ps.Recv(ctx, t0, k, "g", got))
		if !bytes.Equal(got, stamp(small, "g", k)) {
			t.Fatalf("g@%d arrived changed", k)
		}
	}
	dst := make([]byte, large)
	must(t, ps.Recv(ctx, t0, 0, "L", dst))
	if !bytes.Equal(dst, big) {
		t.Fatal("L@0 arrived changed")
	}
	ps.in.mu.Lock()
	for class := range ps.in.free {
		if class >= large {
			t.Fatalf("the inbox took a buffer of %d bytes for a held message", class)
		}
	}
	ps.in.mu.Unlock()

	// L@1 is read into a sink that stops at its first chunk until the
	// small messages sent after L@1 arrived.
	must(t, tr.Flush(ctx))
	must(t, tr.Send(ctx, p0, 1, "L", F32, big))
	smallDone := make(chan struct{})
	s := newSumSink(large/4, 256<<10)
	first := true
	s.onFilled = func(int, int) {
		if first {
			first = false
			select {
			case <-smallDone:
			case <-ctx.Done():
			}
		}
	}
	sinkErr := make(chan error, 1)
	go func() { sinkErr <- ps.RecvSink(ctx, t0, 1, "L", s) }()
	waitFor(t, "the sink's first chunk", func() bool {
		ps.in.mu.Lock()
		defer ps.in.mu.Unlock()
		for _, e := range ps.in.vars["L"].items {
			if e.h != nil && e.h.claimed {
				return true
			}
		}
		return false
	})
	for k := int64(n); k < 2*n; k++ {
		must(t, tr.Send(ctx, p0, k, "g", F32, stamp(small, "g", k)))
	}
	for k := int64(n); k < 2*n; k++ {
		must(t, ps.Recv(ctx, t0, k, "g", got))
		if !bytes.Equal(got, stamp(small, "g", k)) {
			t.Fatalf("g@%d arrived changed", k)
		}
	}
	close(smallDone)
	must(t, <-sinkErr)
	if ctx.Err() != nil {
		t.Fatal("the small messages waited for the large one")
	}
	for i := range s.dst {
		if s.seen[i] != 1 {
			t.Fatalf("element %d of L@1 came %d times", i, s.seen[i])
		}
	}
}

// A step's small messages cost allocations per yamux frame, never per
// message: psgraph's message stream path (Send, the writer's batch, the
// reader's routing, Recv) allocates nothing, and yamux v0.1.2 allocates
// one sendReady per frame it writes and one io.LimitedReader per frame it
// reads. A step here is 48 messages each way between a trainer and a
// pserver (48 transfers of 256 bytes); the allocations of every goroutine
// per step must stay within two per batch written by either side, plus
// one for yamux's occasional window update.
func TestTCPStepAllocatesPerFrameNotPerMessage(t *testing.T) {
	const n, size = 48, 256
	m, _ := tcpJob(t, nil, Trainer(0), PServer(0))
	tr, ps := m[t0], m[p0]
	up, down := make([]string, n), make([]string, n)
	src, mid, dst := make([][]byte, n), make([][]byte, n), make([][]byte, n)
	for i := range up {
		up[i], down[i] = fmt.Sprintf("g%d", i), fmt.Sprintf("w%d", i)
		ps.Accept(Spec{Var: up[i], DType: F32, Bytes: size})
		tr.Accept(Spec{Var: down[i], DType: F32, Bytes: size})
		src[i], mid[i], dst[i] = stamp(size, up[i], 0), make([]byte, size), make([]byte, size)
	}
	ctx := context.Background()
	step := int64(0)
	run := func() {
		for i, v := range up {
			must(t, tr.Send(ctx, p0, step, v, F32, src[i]))
		}
		for i, v := range up {
			must(t, ps.Recv(ctx, t0, step, v, mid[i]))
		}
		for i, v := range down {
			must(t, ps.Send(ctx, t0, step, v, F32, mid[i]))
		}
		for i, v := range down {
			must(t, tr.Recv(ctx, p0, step, v, dst[i]))
		}
		step++
	}
	for i := 0; i < 50; i++ {
		run()
	}
	if !bytes.Equal(dst[n-1], src[n-1]) {
		t.Fatalf("%s came back as % x, sent % x", down[n-1], dst[n-1][:8], src[n-1][:8])
	}
	const runs = 300
	b0 := tr.Stats().BatchesSent + ps.Stats().BatchesSent
	a := testing.AllocsPerRun(runs, run) // runs+1 steps: one warm-up
	batches := float64(tr.Stats().BatchesSent+ps.Stats().BatchesSent-b0) / (runs + 1)
	t.Logf("%.2f allocations and %.2f batches per step of %d messages", a, batches, 2*n)
	if a > 2*batches+1 {
		t.Fatalf("a step of %d messages in %.2f batches allocates %.2f times: more than yamux's two per frame", 2*n, batches, a)
	}
}

// The first Send to a peer after a recv of the node waited writes its
// message itself (msgWriter.direct): when Send returns, the message is
// written (counted in Stats.MsgsSent), not handed to the writer
// goroutine; the burst sent right after it arrives whole and in order.
// It fails if Send hands every message to the goroutine, unless the
// goroutine wrote it before Send returned.
func TestTCPSendAfterAWaitWritesItself(t *testing.T) {
	ctx := context.Background()
	m, _ := tcpJob(t, nil, t0, p0)
	ps, tr := m[p0], m[t0]
	ps.Accept(Spec{Var: "g", DType: F32, Bytes: 64})
	tr.Accept(Spec{Var: "w", DType: F32, Bytes: 64})
	const burst = 10
	for step := int64(0); step < 5; step++ {
		parks := ps.in.parks.Load()
		got := make(chan error, 1)
		dst := make([]byte, 64)
		go func() { got <- ps.Recv(ctx, t0, step, "g", dst) }()
		for ps.in.parks.Load() == parks { // until the recv waits
			runtime.Gosched()
		}
		must(t, tr.Send(ctx, p0, step, "g", F32, stamp(64, "g", step)))
		must(t, <-got)
		if !bytes.Equal(dst, stamp(64, "g", step)) {
			t.Fatalf("g@%d arrived changed", step)
		}
		sent := ps.Stats().MsgsSent
		for i := int64(0); i <= burst; i++ {
			must(t, ps.Send(ctx, t0, step*100+i, "w", F32, stamp(64, "w", step*100+i)))
			// (step 0's first Send starts the writer, whose goroutine
			// takes up the connection first)
			if i == 0 && step > 0 && ps.Stats().MsgsSent != sent+1 {
				t.Fatalf("step %d: the Send after the wait returned with %d messages written, want %d: it handed its message on", step, ps.Stats().MsgsSent-sent, 1)
			}
		}
		must(t, ps.Flush(ctx))
		for i := int64(0); i <= burst; i++ {
			b := make([]byte, 64)
			must(t, tr.Recv(ctx, p0, step*100+i, "w", b))
			if !bytes.Equal(b, stamp(64, "w", step*100+i)) {
				t.Fatalf("w@%d arrived changed", step*100+i)
			}
		}
	}
}
