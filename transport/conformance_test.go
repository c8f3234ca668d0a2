package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
)

// A job factory: endpoints for the given nodes, and the errors they
// reported for rejected messages. Every Endpoint implementation runs the
// same conformance suite.
type factory func(t *testing.T, ids ...NodeID) (map[NodeID]Endpoint, *errLog)

type errLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errLog) add(err error) { l.mu.Lock(); l.errs = append(l.errs, err); l.mu.Unlock() }
func (l *errLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}
func (l *errLog) count() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.errs) }

func inmemFactory(t *testing.T, ids ...NodeID) (map[NodeID]Endpoint, *errLog) {
	log := &errLog{}
	h := NewHub(log.add, ids...)
	m := map[NodeID]Endpoint{}
	for _, id := range ids {
		m[id] = h.Endpoint(id)
	}
	t.Cleanup(func() {
		for _, e := range m {
			e.Close()
		}
	})
	return m, log
}

func TestInmemConformance(t *testing.T) { conformance(t, inmemFactory) }

var (
	t0, t1, p0 = Trainer(0), Trainer(1), PServer(0)
)

func f32(vals ...float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		u := math.Float32bits(v)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return b
}

// i64 encodes keys as an int64 payload: little-endian, 8 bytes each.
func i64(vals ...int64) []byte {
	b := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
	return b
}

func conformance(t *testing.T, mk factory) {
	ctx := context.Background()
	spec := Spec{Var: "W", DType: F32, Bytes: 8}
	t.Run("at most: any length up to the spec's", func(t *testing.T) {
		eps, log := mk(t, t0, p0)
		eps[p0].Accept(Spec{Var: "R", DType: Rows, Bytes: 16, AtMost: true})
		sizes := []int{8, 0, 16, 20, 4}
		for k, n := range sizes {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(k*31 + i)
			}
			must(t, eps[t0].Send(ctx, p0, int64(k), "R", Rows, b))
		}
		must(t, eps[t0].Flush(ctx))
		sink := &Prefix{Buf: make([]byte, 16)}
		for k, n := range sizes {
			if n > 16 {
				continue
			}
			sink.N = 0
			must(t, eps[p0].RecvSink(ctx, t0, int64(k), "R", sink))
			if sink.N != n {
				t.Fatalf("step %d: received %d bytes, sent %d", k, sink.N, n)
			}
			for i := 0; i < n; i++ {
				if sink.Buf[i] != byte(k*31+i) {
					t.Fatalf("step %d: byte %d is %d, sent %d", k, i, sink.Buf[i], byte(k*31+i))
				}
			}
		}
		if log.count() != 1 {
			t.Fatalf("the 20-byte message for an at-most-16 transfer: %d errors reported (%v), want 1", log.count(), log.all())
		}
	})
	t.Run("int64 keys: up to the spec's size, dtype checked", func(t *testing.T) {
		eps, log := mk(t, t0, p0)
		eps[p0].Accept(Spec{Var: "K", DType: I64, Bytes: 32, AtMost: true})
		sent := [][]int64{{math.MinInt64, -1, 0, math.MaxInt64}, {1 << 40}, {}}
		for k, keys := range sent {
			must(t, eps[t0].Send(ctx, p0, int64(k), "K", I64, i64(keys...)))
		}
		must(t, eps[t0].Send(ctx, p0, 3, "K", I64, make([]byte, 40))) // five keys, one too many
		must(t, eps[t0].Send(ctx, p0, 4, "K", I32, make([]byte, 8)))  // int32 ids on an int64 transfer
		must(t, eps[t0].Send(ctx, p0, 5, "K", I64, i64(5, 6)))
		must(t, eps[t0].Flush(ctx))
		sink := &Prefix{Buf: make([]byte, 32)}
		for _, c := range []struct {
			step int64
			keys []int64 // nil: rejected
		}{{0, sent[0]}, {1, sent[1]}, {2, sent[2]}, {3, nil}, {4, nil}, {5, []int64{5, 6}}} {
			sink.N = 0
			err := eps[p0].RecvSink(ctx, t0, c.step, "K", sink)
			if c.keys == nil {
				if !errors.Is(err, ErrRejected) {
					t.Fatalf("step %d: want ErrRejected, got %v", c.step, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("step %d: %v", c.step, err)
			}
			if got := sink.Buf[:sink.N]; string(got) != string(i64(c.keys...)) {
				t.Fatalf("step %d: received %v, sent %v", c.step, got, i64(c.keys...))
			}
		}
		if log.count() != 2 {
			t.Fatalf("want 2 rejections logged (too many keys, a wrong dtype), got %d: %v", log.count(), log.all())
		}
	})
	t.Run("keyed by step and source", func(t *testing.T) {
		eps, _ := mk(t, t0, t1, p0)
		eps[p0].Accept(spec)
		must(t, eps[t0].Send(ctx, p0, 2, "W", F32, f32(2, 2)))
		must(t, eps[t1].Send(ctx, p0, 1, "W", F32, f32(11, 11)))
		must(t, eps[t0].Send(ctx, p0, 1, "W", F32, f32(1, 1)))
		must(t, eps[t0].Flush(ctx))
		must(t, eps[t1].Flush(ctx))
		dst := make([]byte, 8)
		for _, c := range []struct {
			src  NodeID
			step int64
			want []byte
		}{{t0, 1, f32(1, 1)}, {t1, 1, f32(11, 11)}, {t0, 2, f32(2, 2)}} {
			must(t, eps[p0].Recv(ctx, c.src, c.step, "W", dst))
			if string(dst) != string(c.want) {
				t.Fatalf("recv %s@%d: got %v, want %v", c.src, c.step, dst, c.want)
			}
		}
	})
	t.Run("recv blocks until the send arrives", func(t *testing.T) {
		eps, _ := mk(t, t0, p0)
		eps[t0].Accept(spec)
		got := make(chan error, 1)
		dst := make([]byte, 8)
		go func() { got <- eps[t0].Recv(ctx, p0, 5, "W", dst) }()
		must(t, eps[p0].Send(ctx, t0, 5, "W", F32, f32(3, 4)))
		must(t, eps[p0].Flush(ctx))
		must(t, <-got)
		if string(dst) != string(f32(3, 4)) {
			t.Fatalf("got %v", dst)
		}
	})
	t.Run("stale messages are dropped", func(t *testing.T) {
		eps, log := mk(t, t0, p0)
		eps[p0].Accept(spec)
		must(t, eps[t0].Send(ctx, p0, 1, "W", F32, f32(1, 1)))
		must(t, eps[t0].Send(ctx, p0, 2, "W", F32, f32(2, 2)))
		must(t, eps[t0].Done(ctx, p0))
		dst := make([]byte, 8)
		must(t, eps[p0].Recv(ctx, t0, 2, "W", dst))
		if string(dst) != string(f32(2, 2)) {
			t.Fatalf("got %v", dst)
		}
		if err := eps[p0].Recv(ctx, t0, 1, "W", dst); !errors.Is(err, ErrPeerDone) {
			t.Fatalf("the stale step-1 message must be gone, got %v", err)
		}
		if log.count() != 1 {
			t.Fatalf("want one logged stale drop, got %d", log.count())
		}
	})
	t.Run("bad messages are rejected, never delivered", func(t *testing.T) {
		eps, log := mk(t, t0, p0)
		eps[p0].Accept(spec, Spec{Var: "ids", DType: I32, Bytes: 8})
		must(t, eps[t0].Send(ctx, p0, 0, "nope", F32, f32(1, 1))) // unknown transfer
		must(t, eps[t0].Send(ctx, p0, 0, "W", F32, f32(1, 1, 1))) // wrong size
		must(t, eps[t0].Send(ctx, p0, 0, "ids", F32, f32(1, 1)))  // wrong dtype
		must(t, eps[t0].Send(ctx, p0, 1, "W", F32, f32(7, 7)))    // fine
		must(t, eps[t0].Done(ctx, p0))
		dst := make([]byte, 8)
		// A recv of a rejected message's key fails naming the sender
		// instead of waiting for a message that will not come; dst is
		// untouched.
		for _, v := range []string{"W", "ids"} {
			err := eps[p0].Recv(ctx, t0, 0, v, dst)
			if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), t0.String()) || string(dst) != string(make([]byte, 8)) {
				t.Fatalf("recv %s@0: want ErrRejected naming %s with nothing written, got %v (dst %v)", v, t0, err, dst)
			}
		}
		must(t, eps[p0].Recv(ctx, t0, 1, "W", dst))
		if string(dst) != string(f32(7, 7)) {
			t.Fatalf("got %v", dst)
		}
		if err := eps[p0].Recv(ctx, t0, 0, "ids", dst); !errors.Is(err, ErrPeerDone) {
			t.Fatalf("recv ids@0 once its rejection was taken: want ErrPeerDone, got %v", err)
		}
		if log.count() != 3 {
			t.Fatalf("want 3 rejections logged, got %d: %v", log.count(), log.errs)
		}
	})
	t.Run("recv any source, then all done", func(t *testing.T) {
		eps, _ := mk(t, t0, t1, p0)
		eps[p0].Accept(spec)
		must(t, eps[t1].Send(ctx, p0, 4, "W", F32, f32(4, 4)))
		must(t, eps[t1].Done(ctx, p0))
		must(t, eps[t0].Send(ctx, p0, 9, "W", F32, f32(9, 9)))
		must(t, eps[t0].Done(ctx, p0))
		dst := make([]byte, 8)
		seen := map[NodeID]int64{}
		for i := 0; i < 2; i++ {
			k, err := eps[p0].RecvAny(ctx, "W", dst)
			must(t, err)
			if want := f32(float32(k.Step), float32(k.Step)); string(dst) != string(want) {
				t.Fatalf("%v: payload %v", k, dst)
			}
			seen[k.Src] = k.Step
		}
		if seen[t0] != 9 || seen[t1] != 4 {
			t.Fatalf("got %v", seen)
		}
		if _, err := eps[p0].RecvAny(ctx, "W", dst); !errors.Is(err, ErrAllDone) {
			t.Fatalf("want ErrAllDone, got %v", err)
		}
	})
	t.Run("pending on either of two transfers", func(t *testing.T) {
		eps, _ := mk(t, t0, t1, p0)
		ids := Spec{Var: "ids", DType: I32, Bytes: 8, AtMost: true}
		eps[p0].Accept(spec, ids)
		vs := []string{"ids", "W"}
		got := make(chan string, 1)
		go func() {
			v, err := eps[p0].Pending(ctx, vs)
			if err != nil {
				v = err.Error()
			}
			got <- v
		}()
		must(t, eps[t1].Send(ctx, p0, 3, "W", F32, f32(3, 3)))
		must(t, eps[t1].Flush(ctx))
		if v := <-got; v != "W" {
			t.Fatalf("pending with a W waiting: %q", v)
		}
		must(t, eps[t0].Send(ctx, p0, 4, "ids", I32, make([]byte, 4)))
		must(t, eps[t0].Flush(ctx))
		if v, err := eps[p0].Pending(ctx, []string{"ids"}); err != nil || v != "ids" {
			t.Fatalf("pending on ids: %q, %v", v, err)
		}
		// Both pending: the first of vs wins, and nothing was taken.
		for _, order := range [][]string{{"ids", "W"}, {"W", "ids"}} {
			if v, err := eps[p0].Pending(ctx, order); err != nil || v != order[0] {
				t.Fatalf("pending on %v with both waiting: %q, %v", order, v, err)
			}
		}
		sink := &Prefix{Buf: make([]byte, 8)}
		if k, err := eps[p0].RecvAnySink(ctx, "ids", sink); err != nil || sink.N != 4 || k.Src != t0 || k.Step != 4 {
			t.Fatalf("ids after pending: %v, %d bytes, %v", k, sink.N, err)
		}
		dst := make([]byte, 8)
		if k, err := eps[p0].RecvAny(ctx, "W", dst); err != nil || k.Src != t1 || k.Step != 3 {
			t.Fatalf("W after pending: %v, %v", k, err)
		}
		must(t, eps[t0].Done(ctx, p0))
		must(t, eps[t1].Done(ctx, p0))
		if v, err := eps[p0].Pending(ctx, vs); !errors.Is(err, ErrAllDone) {
			t.Fatalf("pending once every peer is done: %q, %v; want ErrAllDone", v, err)
		}
		if _, err := eps[p0].Pending(ctx, []string{"nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
			t.Fatalf("pending on a transfer not accepted: %v", err)
		}
	})
	t.Run("drop before a step", func(t *testing.T) {
		eps, log := mk(t, t0, p0)
		eps[p0].Accept(spec)
		must(t, eps[t0].Send(ctx, p0, 1, "W", F32, f32(1, 1)))
		must(t, eps[t0].Flush(ctx))
		// Wait for delivery of step 1 through a later message on the same stream.
		must(t, eps[t0].Send(ctx, p0, 3, "W", F32, f32(3, 3)))
		must(t, eps[t0].Flush(ctx))
		dst := make([]byte, 8)
		must(t, eps[p0].Recv(ctx, t0, 3, "W", dst))
		eps[p0].DropBefore(5)
		must(t, eps[t0].Send(ctx, p0, 4, "W", F32, f32(4, 4)))
		must(t, eps[t0].Send(ctx, p0, 5, "W", F32, f32(5, 5)))
		must(t, eps[t0].Done(ctx, p0))
		must(t, eps[p0].Recv(ctx, t0, 5, "W", dst))
		if string(dst) != string(f32(5, 5)) {
			t.Fatalf("got %v", dst)
		}
		if log.count() < 2 { // step 1 dropped by Recv(3), step 4 rejected as stale
			t.Fatalf("want stale drops logged, got %v", log.errs)
		}
	})
	t.Run("cancel unblocks recv", func(t *testing.T) {
		eps, _ := mk(t, t0, p0)
		eps[p0].Accept(spec)
		c, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() { got <- eps[p0].Recv(c, t0, 0, "W", make([]byte, 8)) }()
		cancel()
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Fatalf("want context.Canceled, got %v", err)
		}
	})
	t.Run("unknown peer", func(t *testing.T) {
		eps, _ := mk(t, t0, p0)
		if err := eps[t0].Send(ctx, Trainer(7), 0, "W", F32, f32(1, 1)); !errors.Is(err, ErrUnknownPeer) {
			t.Fatalf("want ErrUnknownPeer, got %v", err)
		}
	})
	t.Run("traffic counts payload bytes", func(t *testing.T) {
		eps, _ := mk(t, t0, p0)
		const big = 300 << 10 // above the read-ahead size and smallFrame: held, written in pieces
		eps[p0].Accept(spec, Spec{Var: "big", DType: F32, Bytes: big})
		eps[t0].Accept(spec)
		must(t, eps[t0].Send(ctx, p0, 0, "W", F32, f32(1, 2)))
		must(t, eps[t0].Send(ctx, p0, 0, "big", F32, make([]byte, big)))
		must(t, eps[t0].Send(ctx, p0, 1, "W", F32, f32(1, 2, 3))) // rejected (size), but it crossed
		must(t, eps[t0].Done(ctx, p0))
		must(t, eps[p0].Send(ctx, t0, 1, "W", F32, f32(3, 4)))
		must(t, eps[p0].Done(ctx, t0))
		must(t, eps[p0].Recv(ctx, t0, 0, "W", make([]byte, 8)))
		must(t, eps[p0].Recv(ctx, t0, 0, "big", make([]byte, big)))
		must(t, eps[t0].Recv(ctx, p0, 1, "W", make([]byte, 8)))
		must(t, eps[p0].WaitDone(ctx, t0)) // the rejected payload was read too
		must(t, eps[t0].WaitDone(ctx, p0))
		must(t, eps[t0].Flush(ctx))
		must(t, eps[p0].Flush(ctx))
		tr, ps := eps[t0].Traffic(), eps[p0].Traffic()
		up, down := int64(8+big+12), int64(8)
		if tr.Sent != up || ps.Recv != up || ps.Sent != down || tr.Recv != down {
			t.Fatalf("trainer %+v, pserver %+v: want %d payload bytes up, %d down", tr, ps, up, down)
		}
		for id, x := range map[NodeID]Traffic{t0: tr, p0: ps} {
			if _, inmem := eps[id].(*Inmem); inmem {
				if x.WireSent != 0 || x.WireRecv != 0 {
					t.Errorf("%s: in memory, %+v has wire bytes", id, x)
				}
			} else if x.WireSent < x.Sent+3*frameHeader || x.WireRecv < x.Recv+frameHeader {
				t.Errorf("%s: %+v: the wire carries fewer bytes than the payloads and their headers", id, x)
			}
		}
	})
	t.Run("wait peer, peek, no restarts", func(t *testing.T) {
		eps, _ := mk(t, t0, p0)
		eps[p0].Accept(spec)
		must(t, eps[p0].WaitPeer(ctx, t0)) // connected: at once
		must(t, eps[t0].WaitPeer(ctx, p0))
		// A held message heads its stream until received, so with every
		// message held only the first is pending; psgraph's peers send
		// each stream in step order.
		if tcp, ok := eps[p0].(*TCP); ok && tcp.in.eager == 0 {
			must(t, eps[t0].Send(ctx, p0, 3, "W", F32, f32(3, 3)))
			must(t, eps[t0].Send(ctx, p0, 4, "W", F32, f32(4, 4)))
			waitForPending(t, eps[p0], t0, 1)
		} else {
			must(t, eps[t0].Send(ctx, p0, 4, "W", F32, f32(4, 4)))
			must(t, eps[t0].Send(ctx, p0, 3, "W", F32, f32(3, 3)))
			waitForPending(t, eps[p0], t0, 2)
		}
		if k, err := eps[p0].Peek(ctx, t0, "W"); err != nil || k != 3 {
			t.Fatalf("peek = %d, %v; want the oldest step 3", k, err)
		}
		must(t, eps[p0].Recv(ctx, t0, 3, "W", make([]byte, 8))) // peek left it pending
		if n, _ := eps[p0].Restarts(t0); n != 0 {
			t.Fatalf("restarts = %d", n)
		}
	})
}

// waitForPending polls until n messages from src are pending at e.
func waitForPending(t *testing.T, e Endpoint, src NodeID, n int) {
	var in *inbox
	switch e := e.(type) {
	case *TCP:
		in = e.in
	case *Inmem:
		in = e.in
	}
	waitFor(t, "messages to arrive", func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		c := 0
		for _, q := range in.vars {
			for _, it := range q.items {
				if it.src == src {
					c++
				}
			}
		}
		return c >= n
	})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestInmemSteadyStateAllocs(t *testing.T) {
	eps, _ := inmemFactory(t, t0, p0)
	eps[p0].Accept(Spec{Var: "W", DType: F32, Bytes: 4096})
	src, dst := make([]byte, 4096), make([]byte, 4096)
	ctx := context.Background()
	step := int64(0)
	run := func() {
		if err := eps[t0].Send(ctx, p0, step, "W", F32, src); err != nil {
			t.Fatal(err)
		}
		if err := eps[p0].Recv(ctx, t0, step, "W", dst); err != nil {
			t.Fatal(err)
		}
		step++
	}
	run()
	if a := testing.AllocsPerRun(100, run); a != 0 {
		t.Fatalf("send+recv allocates %.1f times per message", a)
	}
}
