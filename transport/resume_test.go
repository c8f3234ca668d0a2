package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

var chaosTime = flag.Duration("chaos", 1500*time.Millisecond, "how long TestTCPChaosLinkResends cuts connections")

// The conformance suite with every message held until its recv claims
// it (no read-ahead), the path large tensors take.
func TestTCPConformanceHeld(t *testing.T) {
	conformance(t, func(t *testing.T, ids ...NodeID) (map[NodeID]Endpoint, *errLog) {
		m, log := tcpJob(t, func(c *Config) { c.EagerBytes = -1 }, ids...)
		eps := map[NodeID]Endpoint{}
		for id, e := range m {
			eps[id] = e
		}
		return eps, log
	})
}

// sumSink adds a float32 payload into dst as it arrives and counts how
// often each element came, to show every byte arrives exactly once.
type sumSink struct {
	dst      []float32
	buf      []byte
	seen     []int
	onFilled func(off, n int)
}

func newSumSink(elems, chunk int) *sumSink {
	return &sumSink{dst: make([]float32, elems), buf: make([]byte, chunk), seen: make([]int, elems)}
}

func (s *sumSink) Next(off int) []byte { return s.buf[:min(len(s.buf), 4*len(s.dst)-off)] }

func (s *sumSink) Filled(off int, b []byte) {
	for i := 0; i+4 <= len(b); i += 4 {
		e := (off + i) / 4
		s.dst[e] += math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))
		s.seen[e]++
	}
	if s.onFilled != nil {
		s.onFilled(off, len(b))
	}
}

// check asserts dst[i] == base + i and that each element came once.
func (s *sumSink) check(t *testing.T, base float32) {
	t.Helper()
	for i := range s.dst {
		if s.seen[i] != 1 || s.dst[i] != base+float32(i) {
			t.Fatalf("element %d: value %v (want %v), received %d times", i, s.dst[i], base+float32(i), s.seen[i])
		}
	}
}

func ramp(elems int) []byte {
	b := make([]byte, 4*elems)
	for i := 0; i < elems; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(i)))
	}
	return b
}

// A large message goes straight into the receiver's sink, chunk by chunk;
// over both transports the sink sees every byte once, in order.
func TestRecvSinkLarge(t *testing.T) {
	const elems = 3 << 18 // 3 MiB
	ctx := context.Background()
	for name, mk := range map[string]factory{"inmem": inmemFactory, "tcp": tcpFactory} {
		t.Run(name, func(t *testing.T) {
			eps, _ := mk(t, t0, p0)
			eps[p0].Accept(Spec{Var: "W", DType: F32, Bytes: 4 * elems})
			must(t, eps[t0].Send(ctx, p0, 4, "W", F32, ramp(elems)))
			s := newSumSink(elems, 64<<10)
			for i := range s.dst {
				s.dst[i] = 1
			}
			last := -1
			s.onFilled = func(off, n int) {
				if off <= last {
					t.Errorf("chunk at %d after one at %d", off, last)
				}
				last = off
			}
			must(t, eps[p0].(interface {
				RecvSink(context.Context, NodeID, int64, string, Sink) error
			}).RecvSink(ctx, t0, 4, "W", s))
			s.check(t, 1)
			must(t, eps[t0].Flush(ctx))
		})
	}
}

// A connection lost in the middle of a large message: the receiver's sink
// has part of it; after the reconnect the sender writes the rest from that
// byte, and the sink gets every byte exactly once. Whichever side breaks.
func TestTCPResumeMidMessage(t *testing.T) {
	const elems = 2 << 20 // 8 MiB: larger than the stream window
	ctx := context.Background()
	for _, side := range []string{"receiver", "sender"} {
		t.Run("broken by the "+side, func(t *testing.T) {
			m, _ := tcpJob(t, nil, t0, p0)
			tr, ps := m[t0], m[p0]
			ps.Accept(Spec{Var: "W", DType: F32, Bytes: 4 * elems})
			must(t, tr.Send(ctx, p0, 7, "W", F32, ramp(elems)))
			s := newSumSink(elems, 256<<10)
			old := conns(tr, ps)
			var once sync.Once
			s.onFilled = func(off, n int) {
				if off+n >= 3<<20 {
					once.Do(func() {
						if side == "receiver" {
							old.ps.raw.Close()
						} else {
							old.tr.raw.Close()
						}
					})
				}
			}
			err := ps.RecvSink(ctx, t0, 7, "W", s)
			var pe *PeerError
			if !errors.As(err, &pe) || pe.Peer != t0 {
				t.Fatalf("recv across a lost connection: %v, want the peer's error", err)
			}
			got := 0
			for _, n := range s.seen {
				got += n
			}
			if got == 0 || got == elems {
				t.Fatalf("the sink had %d of %d elements when the connection broke", got, elems)
			}
			reconnected(t, tr, ps, old)
			must(t, ps.WaitPeer(ctx, t0))
			if err := ps.Recv(ctx, t0, 7, "W", make([]byte, 4*elems)); err == nil || !strings.Contains(err.Error(), "another receiver") {
				t.Fatalf("a partly received message taken by another receiver: %v", err)
			}
			must(t, ps.RecvSink(ctx, t0, 7, "W", s))
			s.check(t, 0)
			must(t, tr.Flush(ctx))
			must(t, tr.Done(ctx, p0))
			must(t, ps.WaitDone(ctx, t0))
			// The rest was written again from the receiver's byte: the
			// sender may count what the cut lost in flight twice, the
			// receiver counts what it read (a cut piece can be read again).
			sent, recv := tr.Traffic().Sent, ps.Traffic().Recv
			t.Logf("%d payload bytes sent, %d received, for a message of %d", sent, recv, 4*elems)
			if recv < 4*elems || sent < recv {
				t.Fatalf("traffic: %d bytes sent, %d received; want sent >= received >= %d", sent, recv, 4*elems)
			}
		})
	}
}

// Large messages written while no recv claimed them wait in the stream;
// a connection lost then loses them in flight, and the next connection
// writes them again (the receiver's resume frame says what it lacks).
func TestTCPResendsHeldMessages(t *testing.T) {
	const elems = 256 << 10 // 1 MiB each
	ctx := context.Background()
	m, _ := tcpJob(t, nil, t0, p0)
	tr, ps := m[t0], m[p0]
	ps.Accept(Spec{Var: "W", DType: F32, Bytes: 4 * elems})
	payloads := make([][]byte, 3)
	for k := range payloads {
		payloads[k] = ramp(elems)
		binary.LittleEndian.PutUint32(payloads[k], math.Float32bits(float32(100+k)))
		must(t, tr.Send(ctx, p0, int64(k), "W", F32, payloads[k]))
	}
	must(t, tr.Flush(ctx)) // written: in the kernel's and yamux's buffers, not received
	if _, err := ps.Peek(ctx, t0, "W"); err != nil {
		t.Fatal(err)
	}
	old := conns(tr, ps)
	breakConn(t, ps, t0)
	reconnected(t, tr, ps, old)
	dst := make([]byte, 4*elems)
	for k := range payloads {
		must(t, ps.Recv(ctx, t0, int64(k), "W", dst))
		if !bytes.Equal(dst, payloads[k]) {
			t.Fatalf("message %d differs after the resend", k)
		}
	}
	must(t, tr.Done(ctx, p0))
	must(t, ps.WaitDone(ctx, t0))
	if got := ps.Stats().MsgsRecv; got != 3 {
		t.Fatalf("%d messages received, want 3 (each once)", got)
	}
	// Every byte written counts, the ones written again too; the receiver
	// read each once (the lost connection had delivered only a header).
	if sent, recv := tr.Traffic().Sent, ps.Traffic().Recv; sent != 2*3*4*elems || recv != 3*4*elems {
		t.Fatalf("traffic: %d payload bytes sent, %d received; want %d (all written twice) and %d", sent, recv, 2*3*4*elems, 3*4*elems)
	}
}

// Chaos: trainer and pserver exchange windows of small and large
// messages while connections are cut at random from either side: two
// small transfers batched on the message stream, a large one on its bulk
// stream, and one whose size alternates between the two (its messages
// take either stream). Every message arrives exactly once with its
// payload, and Done adds up.
func TestTCPChaosLinkResends(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run")
	}
	ctx := context.Background()
	m, _ := tcpJob(t, func(c *Config) { c.EagerBytes = 1 << 10 }, t0, p0)
	tr, ps := m[t0], m[p0]
	const small, large, window = 16, 64 << 10, 8
	ps.Accept(Spec{Var: "g", DType: F32, Bytes: small}, Spec{Var: "h", DType: F32, Bytes: small}, Spec{Var: "G", DType: F32, Bytes: large},
		Spec{Var: "S", DType: F32, Bytes: 4 << 10, AtMost: true})
	straddle := func(k int64) int { return []int{256, 4 << 10}[k%2] } // inline up to 1 KiB here
	tr.Accept(Spec{Var: "w", DType: F32, Bytes: small})
	stop := make(chan struct{})
	var cuts int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(1+r.IntN(20)) * time.Millisecond):
			}
			e, id := tr, p0
			if r.IntN(2) == 0 {
				e, id = ps, t0
			}
			if c := curConn(e, id); c != nil {
				c.raw.Close()
				cuts++
			}
		}
	}()
	payload := func(n int, k int64) []byte {
		b := make([]byte, n)
		for i := 0; i+8 <= n; i += 8 {
			binary.LittleEndian.PutUint64(b[i:], uint64(k)*1000003+uint64(i))
		}
		return b
	}
	// Sent payloads stay untouched until the reply proves receipt, as in
	// psgraph's steps.
	deadline := time.Now().Add(*chaosTime)
	var k, bytesSent int64
	gs, hs, Gs, Ss := make([][]byte, window), make([][]byte, window), make([][]byte, window), make([][]byte, window)
	got, gotL, reply := make([]byte, small), make([]byte, large), make([]byte, small)
	gotS := &Prefix{Buf: make([]byte, 4<<10)}
	for rounds := 0; time.Now().Before(deadline) || rounds < 5; rounds++ {
		for i := int64(0); i < window; i++ {
			gs[i], hs[i], Gs[i], Ss[i] = payload(small, k+i), payload(small, -k-i), payload(large, k+i), payload(straddle(k+i), k+i)
			must(t, tr.Send(ctx, p0, k+i, "g", F32, gs[i]))
			must(t, tr.Send(ctx, p0, k+i, "G", F32, Gs[i]))
			must(t, tr.Send(ctx, p0, k+i, "S", F32, Ss[i]))
			must(t, tr.Send(ctx, p0, k+i, "h", F32, hs[i]))
			bytesSent += int64(2*small + large + len(Ss[i]))
		}
		for i := int64(0); i < window; i++ {
			must(t, recvRetry(ctx, ps, t0, k+i, "g", got))
			must(t, recvRetry(ctx, ps, t0, k+i, "G", gotL))
			if !bytes.Equal(got, gs[i]) || !bytes.Equal(gotL, Gs[i]) {
				t.Fatalf("message %d arrived changed", k+i)
			}
			must(t, recvRetry(ctx, ps, t0, k+i, "h", got))
			gotS.N = 0
			must(t, retry(ctx, ps, t0, func() error { return ps.RecvSink(ctx, t0, k+i, "S", gotS) }))
			if !bytes.Equal(got, hs[i]) || !bytes.Equal(gotS.Buf[:gotS.N], Ss[i]) {
				t.Fatalf("message %d of h or S arrived changed", k+i)
			}
		}
		must(t, sendRetry(ctx, ps, t0, k+window-1, "w", payload(small, -k)))
		must(t, recvRetry(ctx, tr, p0, k+window-1, "w", reply))
		k += window
	}
	close(stop)
	wg.Wait()
	t.Logf("%d messages up, %d down, under %d cuts", 4*k, k/window, cuts)
	must(t, doneRetry(ctx, tr, p0))
	must(t, doneRetry(ctx, ps, t0))
	must(t, waitDoneRetry(ctx, ps, t0))
	must(t, waitDoneRetry(ctx, tr, p0))
	if got := ps.Stats().MsgsRecv; got != 4*k {
		t.Fatalf("the pserver received %d messages, %d were sent: a resend was duplicated or lost", got, 4*k)
	}
	sent, recv := tr.Traffic().Sent, ps.Traffic().Recv
	t.Logf("trainer->pserver: %d payload bytes sent, %d received, %d in the messages", sent, recv, bytesSent)
	if recv < bytesSent || sent < recv {
		t.Fatalf("traffic: %d bytes sent, %d received; want sent >= received >= %d", sent, recv, bytesSent)
	}
}

// The chaos test's calls retry while the connection is down: psgraph's
// exec layer does the same (it waits for the peer, then asks again).
func retry(ctx context.Context, e *TCP, peer NodeID, f func() error) error {
	for {
		err := f()
		var pe *PeerError
		if err == nil || !errors.As(err, &pe) || errors.Is(err, ErrPeerDone) {
			return err
		}
		if err := e.WaitPeer(ctx, peer); err != nil {
			return err
		}
	}
}

func recvRetry(ctx context.Context, e *TCP, src NodeID, step int64, v string, dst []byte) error {
	return retry(ctx, e, src, func() error { return e.Recv(ctx, src, step, v, dst) })
}

func sendRetry(ctx context.Context, e *TCP, to NodeID, step int64, v string, b []byte) error {
	if err := e.Send(ctx, to, step, v, F32, b); err != nil {
		return err
	}
	return retry(ctx, e, to, func() error { return e.Flush(ctx) })
}

func doneRetry(ctx context.Context, e *TCP, to NodeID) error {
	if err := e.Done(ctx, to); err != nil {
		return err
	}
	return retry(ctx, e, to, func() error { return e.Flush(ctx) })
}

func waitDoneRetry(ctx context.Context, e *TCP, peer NodeID) error {
	return retry(ctx, e, peer, func() error { return e.WaitDone(ctx, peer) })
}

// A peer that stops the job says why: the other side's recvs fail with an
// *Aborted carrying the reason, and it does not redial a peer that
// aborted or finished (no "reconnecting" after a normal end).
func TestTCPAbortAndQuietEnd(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	var mu sync.Mutex
	lw := zerolog.New(zerolog.SyncWriter(&lockedWriter{w: &logs, mu: &mu})).Level(zerolog.DebugLevel)
	m, _ := tcpJob(t, func(c *Config) {
		if c.Listen == "" {
			c.Log = &lw
		}
	}, t0, t1, p0)
	ps := m[p0]
	m[t0].Accept(Spec{Var: "w", DType: F32, Bytes: 8})
	m[t1].Accept(Spec{Var: "w", DType: F32, Bytes: 8})
	must(t, ps.Abort(ctx, t0, "trainer-9 was lost at step 3"))
	err := m[t0].Recv(ctx, p0, 0, "w", make([]byte, 8))
	var ab *Aborted
	if !errors.As(err, &ab) || ab.Reason != "trainer-9 was lost at step 3" || !strings.Contains(err.Error(), "pserver-0: stopped the job: trainer-9") {
		t.Fatalf("recv after an abort: %v", err)
	}
	// trainer-1 ends normally.
	must(t, m[t1].Done(ctx, p0))
	must(t, ps.WaitDone(ctx, t1))
	must(t, ps.Done(ctx, t1))
	must(t, m[t1].WaitDone(ctx, p0))
	ps.Close()
	waitFor(t, "both trainers to see the pserver go", func() bool { return curConn(m[t0], p0) == nil && curConn(m[t1], p0) == nil })
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if strings.Contains(out, "reconnecting") {
		t.Fatalf("a trainer redials a pserver that finished or aborted:\n%s", out)
	}
	for _, want := range []string{"after the peer stopped the job", "after the peer finished"} {
		if !strings.Contains(out, want) {
			t.Fatalf("log lacks %q:\n%s", want, out)
		}
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
