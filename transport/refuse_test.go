package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// refusalJob is a pserver expecting trainer-0, and trainer-0 connected to
// it, each accepting one transfer from the other.
func refusalJob(t *testing.T, tweak func(*Config)) (tr, ps *TCP, log *errLog) {
	t.Helper()
	m, log := tcpJob(t, tweak, Trainer(0), PServer(0))
	tr, ps = m[Trainer(0)], m[PServer(0)]
	ps.Accept(Spec{Var: "g", DType: F32, Bytes: 8})
	tr.Accept(Spec{Var: "w", DType: F32, Bytes: 8})
	exchange(t, tr, ps, 0)
	return tr, ps, log
}

// exchange sends a message each way between tr and ps and receives it.
func exchange(t *testing.T, tr, ps *TCP, step int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, tr.Send(ctx, ps.Self(), step, "g", F32, f32(1, 2)))
	must(t, ps.Recv(ctx, tr.Self(), step, "g", make([]byte, 8)))
	must(t, ps.Send(ctx, tr.Self(), step, "w", F32, f32(3, 4)))
	must(t, tr.Recv(ctx, ps.Self(), step, "w", make([]byte, 8)))
}

// dialAs dials ps over loopback as id, with the job's token and hash.
func dialAs(id NodeID, ps *TCP, connect time.Duration) (*TCP, error) {
	return Dial(context.Background(), Config{Self: id, Peers: map[NodeID]string{ps.Self(): ps.Addr().String()},
		Token: []byte("s3cret"), JobHash: "job", ConnectTimeout: connect})
}

// refusals waits until the listener reported a refusal to OnError and
// checks that it reported nothing else (no lost connection, no restart).
func refusals(t *testing.T, log *errLog, also error) {
	t.Helper()
	waitFor(t, "the listener to report the refusal", func() bool { return log.count() > 0 })
	for _, err := range log.all() {
		if !errors.Is(err, ErrRefused) || (also != nil && !errors.Is(err, also)) {
			t.Fatalf("the listener reported %v; want only refusals", err)
		}
	}
}

// A node id the listener does not expect is refused in the handshake,
// once it proved the token: the dialer gets ErrRefused at once (not after
// retrying until its ConnectTimeout), and the connected trainer goes on.
func TestTCPRefusesUnknownNodeID(t *testing.T) {
	tr, ps, log := refusalJob(t, nil)
	old := conns(tr, ps)
	const connect = 30 * time.Second
	start := time.Now()
	e, err := dialAs(Trainer(7), ps, connect)
	if err == nil {
		e.Close()
		t.Fatal("the listener admitted trainer-7, which it does not expect")
	}
	if !errors.Is(err, ErrRefused) || errors.Is(err, errDuplicate) || !strings.Contains(err.Error(), "not a peer it expects") {
		t.Fatalf("want ErrRefused (not a peer it expects), got %v", err)
	}
	if d := time.Since(start); d >= connect/2 {
		t.Fatalf("the refusal took %s: it was retried, but it is final", d)
	}
	refusals(t, log, nil)
	if now := conns(tr, ps); now != old {
		t.Fatal("trainer-0's connection changed")
	}
	exchange(t, tr, ps, 1)
	// The id is judged only after the token proof: a stranger without the
	// token learns nothing about which ids the listener expects.
	_, err = Dial(context.Background(), Config{Self: Trainer(7), Peers: map[NodeID]string{ps.Self(): ps.Addr().String()},
		Token: []byte("wrong"), JobHash: "job", ConnectTimeout: connect})
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("an unknown id without the token: want ErrAuth, got %v", err)
	}
}

// A second connection with the node id of a live one is refused in the
// handshake as already connected. The dialer retries that refusal (the
// listener may not yet have noticed that the id's previous connection
// died) until its ConnectTimeout, then fails with ErrRefused. The live
// connection is untouched: the same connection at both ends, no restart
// (the second dialer is another incarnation), messages both ways.
func TestTCPRefusesSecondLiveConnection(t *testing.T) {
	tr, ps, log := refusalJob(t, nil)
	old := conns(tr, ps)
	restarts, _ := ps.Restarts(Trainer(0))
	e, err := dialAs(Trainer(0), ps, 500*time.Millisecond)
	if err == nil {
		e.Close()
		t.Fatal("the listener admitted a second live connection of trainer-0")
	}
	if !errors.Is(err, ErrRefused) || !errors.Is(err, errDuplicate) {
		t.Fatalf("want ErrRefused (already connected), got %v", err)
	}
	refusals(t, log, errDuplicate)
	if now := conns(tr, ps); now != old {
		t.Fatal("trainer-0's connection changed")
	}
	if n, _ := ps.Restarts(Trainer(0)); n != restarts {
		t.Fatalf("the pserver counted %d restarts of trainer-0, want %d", n, restarts)
	}
	if s := ps.Stats(); s.Connections != 1 {
		t.Fatalf("the pserver holds %d connections, want 1", s.Connections)
	}
	exchange(t, tr, ps, 1)
}

// stranger writes b to ps's port over loopback and reads until the
// listener closes the connection, within wait; it returns what the
// listener answered.
func stranger(t *testing.T, ps *TCP, b []byte, wait time.Duration) []byte {
	t.Helper()
	c, err := net.Dial("tcp", ps.Addr().String())
	must(t, err)
	defer c.Close()
	_, err = c.Write(b)
	must(t, err)
	c.SetReadDeadline(time.Now().Add(wait))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("the listener did not close the connection (%d bytes answered): %v", len(got), err)
	}
	return got
}

// Garbage is refused at its first 4 bytes: a listener that reads 4 bytes
// other than the magic closes the connection at once, answering nothing,
// without waiting for the rest of a hello or for its HandshakeTimeout,
// and reports the stranger to OnError. The connected trainer goes on.
func TestTCPRefusesGarbageAtFirstBytes(t *testing.T) {
	const handshake = time.Minute
	tr, ps, log := refusalJob(t, func(c *Config) { c.HandshakeTimeout = handshake })
	old := conns(tr, ps)
	// 4 bytes and no more: a listener that read a whole hello before it
	// checked the magic would wait for the rest until its HandshakeTimeout.
	if got := stranger(t, ps, []byte("GET "), handshake/3); len(got) != 0 {
		t.Fatalf("the listener answered a stranger: %q", got)
	}
	waitFor(t, "the listener to report the stranger", func() bool { return log.count() > 0 })
	for _, err := range log.all() {
		if !strings.Contains(err.Error(), "handshake: not a psgraph peer") {
			t.Fatalf("the listener reported %v; want only the stranger", err)
		}
	}
	if now := conns(tr, ps); now != old {
		t.Fatal("trainer-0's connection changed")
	}
	exchange(t, tr, ps, 1)
}

// A handshake that starts right (the magic) and then stalls is closed
// once the listener's HandshakeTimeout passed, not before, and the
// listener answers nothing.
func TestTCPHalfHandshakeTimesOut(t *testing.T) {
	const handshake = 300 * time.Millisecond
	m, log := tcpJob(t, func(c *Config) { c.HandshakeTimeout = handshake }, PServer(0))
	start := time.Now() // before the dial: the listener's deadline starts after it
	if got := stranger(t, m[PServer(0)], []byte(hsMagic), 30*time.Second); len(got) != 0 {
		t.Fatalf("the listener answered a half hello: %q", got)
	}
	if d := time.Since(start); d < handshake {
		t.Fatalf("closed after %s, before the handshake timeout of %s", d, handshake)
	}
	waitFor(t, "the listener to report the timeout", func() bool { return log.count() > 0 })
}
