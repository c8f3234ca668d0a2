package transport

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestSplitAddr(t *testing.T) {
	for _, c := range []struct{ in, network, address string }{
		{"127.0.0.1:7000", "tcp", "127.0.0.1:7000"},
		{"ps-0.ps:7000", "tcp", "ps-0.ps:7000"},
		{"unix:/tmp/j/ps-0.sock", "unix", "/tmp/j/ps-0.sock"},
	} {
		if n, a := splitAddr(c.in); n != c.network || a != c.address {
			t.Errorf("splitAddr(%q) = %q, %q; want %q, %q", c.in, n, a, c.network, c.address)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "localhost:1": true, "[::1]:1": true, "unix:/x.sock": true,
		"10.0.0.1:1": false, "ps-0:1": false, "nonsense": false} {
		if got := local(addr); got != want {
			t.Errorf("local(%q) = %v, want %v", addr, got, want)
		}
	}
}

// A pserver SIGKILLed on a Unix socket leaves the socket's file behind;
// the pserver restarted at the same address must listen there again. A
// file another listener serves, or one that is not a socket, is left
// alone with an error that says which.
func TestUnixListenAfterAStaleSocket(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("psgraph train uses TCP on Windows")
	}
	dir, err := os.MkdirTemp("", "psgraph-unix-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ps-0.sock")
	// What a killed process leaves: a socket file nobody listens on.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the stale socket's file is gone: %v", err)
	}

	tweak := func(c *Config) {
		if c.Listen != "" {
			c.Listen = UnixPrefix + path
		}
	}
	m, _ := tcpJob(t, tweak, Trainer(0), PServer(0))
	ps, tr := m[PServer(0)], m[Trainer(0)]
	ps.Accept(Spec{Var: "g", DType: F32, Bytes: 8})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, tr.Send(ctx, PServer(0), 0, "g", F32, f32(1, 2)))
	got := make([]byte, 8)
	must(t, ps.Recv(ctx, Trainer(0), 0, "g", got))
	if string(got) != string(f32(1, 2)) {
		t.Fatalf("received %v over the reclaimed socket, want %v", got, f32(1, 2))
	}

	// The live listener's file: a second pserver there is refused.
	_, err = Listen(ctx, Config{Self: PServer(1), Listen: UnixPrefix + path, Peers: map[NodeID]string{Trainer(0): ""}})
	if err == nil || !strings.Contains(err.Error(), "another process listens on "+path) {
		t.Fatalf("a second listener on a live socket: %v, want \"another process listens on %s\"", err, path)
	}

	// A regular file is never removed.
	plain := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(plain, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Listen(ctx, Config{Self: PServer(1), Listen: UnixPrefix + plain, Peers: map[NodeID]string{Trainer(0): ""}})
	if err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Fatalf("listening on a regular file: %v, want \"is not a socket\"", err)
	}
	if b, err := os.ReadFile(plain); err != nil || string(b) != "keep me" {
		t.Fatalf("the regular file was touched: %q, %v", b, err)
	}
}

// TLS needs a host name to verify, which a Unix socket has not: a TLS
// endpoint on one is refused up front, on both sides, saying what to do.
func TestTLSOnAUnixSocketIsRefused(t *testing.T) {
	cfg := &tls.Config{ServerName: "ps-0"}
	_, err := Listen(context.Background(), Config{Self: PServer(0), Listen: "unix:/tmp/ps-0.sock", Token: []byte("t"), TLS: cfg, Peers: map[NodeID]string{Trainer(0): ""}})
	if err == nil || !strings.Contains(err.Error(), "TLS on the Unix socket unix:/tmp/ps-0.sock") {
		t.Errorf("Listen with TLS on a Unix socket: %v", err)
	}
	_, err = Dial(context.Background(), Config{Self: Trainer(0), Token: []byte("t"), TLS: cfg, Peers: map[NodeID]string{PServer(0): "unix:/tmp/ps-0.sock"}})
	if err == nil || !strings.Contains(err.Error(), "use a TCP address for TLS") {
		t.Errorf("Dial with TLS to a Unix socket: %v", err)
	}
}
