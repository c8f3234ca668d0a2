package transport

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// gatedConn records the size of every write to the connection and can
// hold writes until released.
type gatedConn struct {
	net.Conn
	mu     sync.Mutex
	sizes  []int
	gate   chan struct{} // closed: writes pass
	inside chan struct{} // a write is waiting at the gate
}

func (g *gatedConn) Write(b []byte) (int, error) {
	select {
	case g.inside <- struct{}{}:
	default:
	}
	<-g.gate
	g.mu.Lock()
	g.sizes = append(g.sizes, len(b))
	g.mu.Unlock()
	return g.Conn.Write(b)
}

func (g *gatedConn) writes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.sizes...)
}

// Small writes made while the connection is busy go out together in one
// write, in order; a large write goes out directly after what is pending;
// Close writes what is pending before it closes.
func TestCoalescingConnCoalescesWrites(t *testing.T) {
	a, b := net.Pipe()
	g := &gatedConn{Conn: a, gate: make(chan struct{}), inside: make(chan struct{}, 1)}
	c := newCoalescingConn(g, &TCP{cfg: Config{KeepAlive: time.Minute}})
	got := make(chan []byte)
	go func() {
		all, _ := io.ReadAll(b)
		got <- all
	}()
	var want bytes.Buffer
	write := func(p []byte) {
		t.Helper()
		if n, err := c.Write(p); err != nil || n != len(p) {
			t.Fatalf("Write(%d bytes) = %d, %v", len(p), n, err)
		}
		want.Write(p)
	}
	small := func(v byte, n int) []byte { return bytes.Repeat([]byte{v}, n) }
	write(small(1, 12)) // the flusher takes it and waits at the gate
	<-g.inside
	write(small(2, 12))
	write(small(3, 100))
	write(small(4, 12))
	close(g.gate)
	large := small(5, directWrite)
	write(large) // waits for the flusher, then goes out directly
	write(small(6, 7))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if all := <-got; !bytes.Equal(all, want.Bytes()) {
		t.Fatalf("the peer read %d bytes, not the %d written in order", len(all), want.Len())
	}
	sizes := g.writes()
	if len(sizes) < 3 || sizes[0] != 12 || sizes[1] != 124 {
		t.Fatalf("writes to the connection: %v; want 12, then the three writes made meanwhile as one of 124 bytes", sizes)
	}
	if c.t.bytesSent.Load() != int64(want.Len()) {
		t.Fatalf("counted %d bytes sent, want %d", c.t.bytesSent.Load(), want.Len())
	}
}

// A failed write fails the later ones and closes the connection.
func TestCoalescingConnWriteError(t *testing.T) {
	a, b := net.Pipe()
	b.Close()
	c := newCoalescingConn(a, &TCP{cfg: Config{KeepAlive: time.Minute}})
	defer c.Close()
	if _, err := c.Write([]byte("lost")); err != nil {
		t.Fatalf("a buffered write fails at once: %v", err)
	}
	waitFor(t, "the flusher's write to fail", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.err != nil })
	if _, err := c.Write([]byte("x")); err == nil {
		t.Fatal("a write after the connection failed succeeded")
	}
	if _, err := c.Write(make([]byte, directWrite)); err == nil {
		t.Fatal("a direct write after the connection failed succeeded")
	}
}

// countingConn counts reads from the connection.
type countingConn struct {
	net.Conn
	reads int
}

func (c *countingConn) Read(b []byte) (int, error) { c.reads++; return c.Conn.Read(b) }

// yamux's small reads of a burst are served from one read of the
// connection; a large read goes straight into the caller's memory after
// what was buffered; the bytes come in order.
func TestCoalescingConnReadAhead(t *testing.T) {
	a, b := net.Pipe()
	rc := &countingConn{Conn: a}
	c := newCoalescingConn(rc, &TCP{cfg: Config{KeepAlive: time.Minute}})
	defer c.Close()
	burst := make([]byte, 300)
	for i := range burst {
		burst[i] = byte(i)
	}
	large := bytes.Repeat([]byte{7}, 2*readAhead)
	go func() {
		b.Write(burst) // one write: net.Pipe hands it to one read
		b.Write(large)
		b.Close()
	}()
	var got []byte
	for _, n := range []int{12, 100, 12, 176} {
		p := make([]byte, n)
		if _, err := io.ReadFull(c, p); err != nil {
			t.Fatal(err)
		}
		got = append(got, p...)
	}
	if !bytes.Equal(got, burst) || rc.reads != 1 {
		t.Fatalf("four small reads of a 300-byte burst took %d reads of the connection (want 1), bytes equal: %v", rc.reads, bytes.Equal(got, burst))
	}
	p := make([]byte, len(large))
	if _, err := io.ReadFull(c, p); err != nil || !bytes.Equal(p, large) {
		t.Fatalf("large read: %v", err)
	}
	if rc.reads != 2 {
		t.Fatalf("a %d-byte read took %d reads of the connection; want 1, straight into the caller's memory", len(large), rc.reads-1)
	}
}

// Close of a connection whose peer sent bytes this side had not read yet
// still delivers everything written before it: it shuts the sending side
// and reads the peer's bytes until the peer's end, instead of closing a
// socket with unread input, which makes the kernel reset the connection
// and drop what was written but not transmitted yet (a node's last
// messages and its abort frame were lost that way under load). Real
// loopback TCP: the peer sends 64 KiB nobody reads before Close starts (a
// receive loop held back, as on a loaded machine), this side writes 16
// MiB, more than the socket buffers hold, and closes at once.
func TestCoalescingConnCloseDeliversWithUnreadInput(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		n   int64
		err error
	}
	got := make(chan result, 1)
	go func() {
		p, err := ln.Accept()
		if err != nil {
			got <- result{0, err}
			return
		}
		defer p.Close()
		p.Write(make([]byte, 64<<10)) // unread by the other side when it closes
		n, err := io.Copy(io.Discard, p)
		got <- result{n, err}
	}()
	raw, err := net.Dial("tcp", "127.0.0.1:"+portOf(ln.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	c := newCoalescingConn(raw, &TCP{cfg: Config{KeepAlive: time.Minute}})
	const size = 16 << 20
	if n, err := c.Write(make([]byte, size)); err != nil || n != size {
		t.Fatalf("Write = %d, %v", n, err)
	}
	// The receive loop runs only once Close started: the peer's bytes
	// wait in the socket until then.
	closing := make(chan struct{})
	go func() {
		<-closing
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	}()
	close(closing)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || r.n != size {
		t.Fatalf("the peer read %d of %d bytes, then %v; want all of them and a clean end (a reset drops what was not transmitted yet)", r.n, size, r.err)
	}
}

func portOf(a net.Addr) string { return fmt.Sprint(a.(*net.TCPAddr).Port) }
