package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/psgraph/psgraph/dsl/ir"
)

// tcpJob starts one Listen per pserver and one Dial per trainer on loopback.
func tcpJob(t testing.TB, tweak func(*Config), ids ...NodeID) (map[NodeID]*TCP, *errLog) {
	t.Helper()
	log := &errLog{}
	var trainers, pservers []NodeID
	for _, id := range ids {
		if id.Role == ir.TrainerRole {
			trainers = append(trainers, id)
		} else {
			pservers = append(pservers, id)
		}
	}
	m := map[NodeID]*TCP{}
	t.Cleanup(func() {
		for _, e := range m {
			e.Close()
		}
	})
	addrs := map[NodeID]string{}
	for _, ps := range pservers {
		cfg := Config{Self: ps, Listen: "127.0.0.1:0", Peers: map[NodeID]string{}, Token: []byte("s3cret"), JobHash: "job", OnError: log.add}
		for _, tr := range trainers {
			cfg.Peers[tr] = ""
		}
		if tweak != nil {
			tweak(&cfg)
		}
		e, err := Listen(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		m[ps] = e
		addrs[ps] = e.Addr().String()
		if strings.HasPrefix(cfg.Listen, UnixPrefix) {
			addrs[ps] = cfg.Listen
		}
	}
	for _, tr := range trainers {
		cfg := Config{Self: tr, Peers: addrs, Token: []byte("s3cret"), JobHash: "job", OnError: log.add, ConnectTimeout: 5 * time.Second}
		if tweak != nil {
			tweak(&cfg)
		}
		e, err := Dial(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		m[tr] = e
	}
	// Dial returns once the trainer's side is set up; the pserver's side
	// finishes on its own goroutine. Tests that cut connections need both.
	for _, ps := range pservers {
		for _, tr := range trainers {
			waitFor(t, fmt.Sprintf("%s to attach %s", ps, tr), func() bool { return curConn(m[ps], tr) != nil })
		}
	}
	return m, log
}

func tcpFactory(t *testing.T, ids ...NodeID) (map[NodeID]Endpoint, *errLog) {
	m, log := tcpJob(t, nil, ids...)
	eps := map[NodeID]Endpoint{}
	for id, e := range m {
		eps[id] = e
	}
	return eps, log
}

func TestTCPConformance(t *testing.T) { conformance(t, tcpFactory) }

// onUnix is a tcpJob tweak: the pservers listen on Unix-domain sockets in
// a fresh directory (a short path: a socket's path has at most 104 bytes).
func onUnix(t testing.TB) func(*Config) {
	t.Helper()
	dir, err := os.MkdirTemp("", "psgraph-unix-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return func(c *Config) {
		if c.Listen != "" {
			c.Listen = UnixPrefix + filepath.Join(dir, c.Self.String()+".sock")
		}
	}
}

// The same suite with every pserver on a Unix-domain socket, the
// transport of `psgraph train` (addr.go).
func TestUnixConformance(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("psgraph train uses TCP on Windows")
	}
	conformance(t, func(t *testing.T, ids ...NodeID) (map[NodeID]Endpoint, *errLog) {
		m, log := tcpJob(t, onUnix(t), ids...)
		eps := map[NodeID]Endpoint{}
		for id, e := range m {
			eps[id] = e
			if id.Role == ir.PServerRole {
				if a := e.Addr(); a == nil || a.Network() != "unix" {
					t.Fatalf("%s listens on %v, want a Unix socket", id, a)
				}
			}
		}
		return eps, log
	})
}

// waitFor polls a condition (no fixed sleep stands in for it).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

func TestTCPConnectionsPerPair(t *testing.T) {
	ctx := context.Background()
	ids := []NodeID{Trainer(0), Trainer(1), PServer(0), PServer(1)}
	m, _ := tcpJob(t, nil, ids...)
	const transfers = 50
	for _, ps := range ids[2:] {
		for i := 0; i < transfers; i++ {
			m[ps].Accept(Spec{Var: fmt.Sprintf("g%d", i), DType: F32, Bytes: 16})
		}
	}
	for _, tr := range ids[:2] {
		for i := 0; i < transfers; i++ {
			m[tr].Accept(Spec{Var: fmt.Sprintf("w%d", i), DType: F32, Bytes: 16})
		}
	}
	buf, dst := make([]byte, 16), make([]byte, 16) // a sent payload must not change before Flush
	for _, tr := range ids[:2] {
		for _, ps := range ids[2:] {
			for i := 0; i < transfers; i++ {
				must(t, m[tr].Send(ctx, ps, 0, fmt.Sprintf("g%d", i), F32, buf))
				must(t, m[ps].Send(ctx, tr, 0, fmt.Sprintf("w%d", i), F32, buf))
			}
		}
	}
	for _, a := range ids {
		peers := ids[:2]
		prefix := "g"
		if a.Role == ir.TrainerRole {
			peers, prefix = ids[2:], "w"
		}
		for _, b := range peers {
			for i := 0; i < transfers; i++ {
				must(t, m[a].Recv(ctx, b, 0, fmt.Sprintf("%s%d", prefix, i), dst))
			}
		}
	}
	total := 0
	for _, e := range m {
		total += e.Stats().Connections
	}
	// each connection is counted at both of its ends
	if total != 2*2*2 {
		t.Fatalf("want %d connections (2x2 pairs at both ends), got %d", 8, total)
	}
	for _, id := range ids {
		// A message counts as sent once its writer is done with it, which
		// can be after the peer received it: Flush waits for that.
		must(t, m[id].Flush(ctx))
		if s := m[id].Stats(); s.Connections != 2 || s.MsgsSent != 2*transfers || s.MsgsRecv != 2*transfers {
			t.Fatalf("%s: %+v", id, s)
		}
	}
}

func TestTCPWrongToken(t *testing.T) {
	m, log := tcpJob(t, nil, PServer(0))
	_, err := Dial(context.Background(), Config{Self: Trainer(0), Peers: map[NodeID]string{PServer(0): m[PServer(0)].Addr().String()},
		Token: []byte("wrong"), JobHash: "job", ConnectTimeout: 5 * time.Second})
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("want ErrAuth, got %v", err)
	}
	if !strings.Contains(err.Error(), "authentication failed") || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("message: %v", err)
	}
	waitFor(t, "the listener to log the refusal", func() bool { return log.count() == 1 })
}

func TestTCPWrongJob(t *testing.T) {
	m, _ := tcpJob(t, nil, PServer(0))
	_, err := Dial(context.Background(), Config{Self: Trainer(0), Peers: map[NodeID]string{PServer(0): m[PServer(0)].Addr().String()},
		Token: []byte("s3cret"), JobHash: "another job", ConnectTimeout: 5 * time.Second})
	if !errors.Is(err, ErrJobMismatch) {
		t.Fatalf("want ErrJobMismatch, got %v", err)
	}
}

func TestTCPListenWithoutToken(t *testing.T) {
	_, err := Listen(context.Background(), Config{Self: PServer(0), Listen: "0.0.0.0:0"})
	if err == nil || !strings.Contains(err.Error(), "token") {
		t.Fatalf("want a refusal naming the token, got %v", err)
	}
	e, err := Listen(context.Background(), Config{Self: PServer(0), Listen: "0.0.0.0:0", Insecure: true})
	must(t, err)
	e.Close()
	e, err = Listen(context.Background(), Config{Self: PServer(0), Listen: "127.0.0.1:0"})
	must(t, err)
	e.Close()
}

func TestTCPStartupOrder(t *testing.T) {
	// Reserve a port, start the trainer first, the pserver after.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	l.Close()
	got := make(chan error, 1)
	var tr *TCP
	go func() {
		var err error
		tr, err = Dial(context.Background(), Config{Self: Trainer(0), Peers: map[NodeID]string{PServer(0): addr}, ConnectTimeout: 10 * time.Second})
		got <- err
	}()
	ps, err := Listen(context.Background(), Config{Self: PServer(0), Listen: addr, Peers: map[NodeID]string{Trainer(0): ""}})
	must(t, err)
	defer ps.Close()
	must(t, <-got)
	tr.Close()
}

func TestTCPConnectTimeoutNamesPeer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	l.Close()
	_, err = Dial(context.Background(), Config{Self: Trainer(0), Peers: map[NodeID]string{PServer(3): addr}, ConnectTimeout: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "pserver-3") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("want an error naming pserver-3 at %s, got %v", addr, err)
	}
}

func TestTCPPeerLossFailsRecv(t *testing.T) {
	m, _ := tcpJob(t, nil, Trainer(0), PServer(0))
	m[Trainer(0)].Accept(Spec{Var: "W", DType: F32, Bytes: 8})
	got := make(chan error, 1)
	go func() { got <- m[Trainer(0)].Recv(context.Background(), PServer(0), 0, "W", make([]byte, 8)) }()
	m[PServer(0)].Close()
	err := <-got
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Peer != PServer(0) {
		t.Fatalf("want an error naming pserver-0, got %v", err)
	}
}

func TestTCPCloseNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		m, _ := tcpJob(t, nil, Trainer(0), Trainer(1), PServer(0))
		m[PServer(0)].Accept(Spec{Var: "W", DType: F32, Bytes: 8}, Spec{Var: "V", DType: F32, Bytes: 8})
		ctx := context.Background()
		for _, tr := range []NodeID{Trainer(0), Trainer(1)} {
			must(t, m[tr].Send(ctx, PServer(0), 0, "W", F32, f32(1, 2)))
			must(t, m[tr].Send(ctx, PServer(0), 0, "V", F32, f32(1, 2)))
			must(t, m[tr].Done(ctx, PServer(0)))
		}
		for _, tr := range []NodeID{Trainer(0), Trainer(1)} {
			must(t, m[PServer(0)].Recv(ctx, tr, 0, "W", make([]byte, 8)))
		}
		for _, e := range m {
			must(t, e.Close())
			must(t, e.Close()) // idempotent
		}
	}()
	waitFor(t, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= before })
}

// TestTCPSteadyStateAllocs counts allocations per message on a loopback
// pair (all goroutines: ours and yamux's). psgraph's own path allocates
// nothing; yamux v0.1.2 allocates one sendReady per frame it writes (and
// one per window update), which this bound allows.
func TestTCPSteadyStateAllocs(t *testing.T) {
	m, _ := tcpJob(t, nil, Trainer(0), PServer(0))
	tr, ps := m[Trainer(0)], m[PServer(0)]
	ps.Accept(Spec{Var: "W", DType: F32, Bytes: 4096})
	src, dst := make([]byte, 4096), make([]byte, 4096)
	ctx := context.Background()
	step := int64(0)
	p0, t0 := PServer(0), Trainer(0) // PServer(i) allocates its name
	run := func() {
		must(t, tr.Send(ctx, p0, step, "W", F32, src))
		must(t, ps.Recv(ctx, t0, step, "W", dst))
		must(t, tr.Flush(ctx))
		step++
	}
	for i := 0; i < 100; i++ {
		run()
	}
	a := testing.AllocsPerRun(500, run)
	t.Logf("%.2f allocations per message (yamux: sendReady + LimitedReader)", a)
	if a > 2 {
		t.Fatalf("send+recv allocates %.2f times per message", a)
	}
}
