package transport

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"

	"github.com/hashicorp/yamux"
)

// yamuxPair is a yamux session pair over loopback TCP and one stream
// the client opened, as the server accepted it.
func yamuxPair(t *testing.T, window uint32) (w, r *yamux.Stream) {
	t.Helper()
	client, server := yamuxSessions(t, window)
	return yamuxStream(t, client, server)
}

// yamuxSessions is a yamux session pair over loopback TCP.
func yamuxSessions(t *testing.T, window uint32) (client, server *yamux.Session) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	if window > 0 {
		cfg.MaxStreamWindowSize = window
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	cc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	client, err = yamux.Client(cc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	server, err = yamux.Server(sc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// yamuxStream opens a stream from client and accepts it on server.
func yamuxStream(t *testing.T, client, server *yamux.Session) (w, r *yamux.Stream) {
	t.Helper()
	w, err := client.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte{1}); err != nil { // the SYN, so Accept returns
		t.Fatal(err)
	}
	r, err = server.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	var one [1]byte
	if _, err := io.ReadFull(r, one[:]); err != nil || one[0] != 1 {
		t.Fatalf("first byte: %v %v", one, err)
	}
	return w, r
}

// TestYamuxReadFullAcrossFramesAndBuffer: third_party/yamux's ReadFull
// (frames read straight into the caller's buffer) returns the bytes
// written, in order, whatever part of them was already buffered when it
// started, across many frames and window updates (the window is smaller
// than the message), and with small reads between large ones.
func TestYamuxReadFullAcrossFramesAndBuffer(t *testing.T) {
	w, r := yamuxPair(t, 256<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{3 << 20, 7, 100 << 10, 1, 5<<20 + 3, 64 << 10, 33 << 10, 2}
	var want bytes.Buffer
	for _, n := range sizes {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		want.Write(b)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := w.Write(want.Bytes())
		errc <- err
	}()
	got := make([]byte, 0, want.Len())
	for i, n := range sizes {
		b := make([]byte, n)
		var k int
		var err error
		if i%2 == 0 {
			k, err = r.ReadFull(b)
		} else {
			k, err = io.ReadFull(r, b) // upstream's Read, between ReadFulls
		}
		if err != nil || k != n {
			t.Fatalf("read %d of %d bytes: %v", k, n, err)
		}
		got = append(got, b...)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		i := 0
		for i < len(got) && got[i] == want.Bytes()[i] {
			i++
		}
		t.Fatalf("bytes differ from byte %d of %d", i, len(got))
	}
}

// TestYamuxReadFullEndsAtClose: a stream closed part way through a
// ReadFull returns what arrived and io.ErrUnexpectedEOF (io.EOF if
// nothing did), as io.ReadFull does.
func TestYamuxReadFullEndsAtClose(t *testing.T) {
	w, r := yamuxPair(t, 0)
	part := bytes.Repeat([]byte{7}, 300<<10)
	go func() {
		w.Write(part)
		w.Close()
	}()
	b := make([]byte, 1<<20)
	n, err := r.ReadFull(b)
	if !errors.Is(err, io.ErrUnexpectedEOF) || n != len(part) || !bytes.Equal(b[:n], part) {
		t.Fatalf("ReadFull after %d bytes and a close: %d, %v; want %d and io.ErrUnexpectedEOF", len(part), n, err, len(part))
	}
	if n, err := r.ReadFull(b); n != 0 || err != io.EOF {
		t.Fatalf("ReadFull of a closed stream: %d, %v; want 0 and io.EOF", n, err)
	}
}

// TestYamuxReadTakesFrameDirectly: a Read waiting with a large buffer
// gets a frame's bytes, and a Read with a small one after it gets the
// rest of a frame that did not fit, in order.
func TestYamuxReadTakesFrameDirectly(t *testing.T) {
	w, r := yamuxPair(t, 0)
	msg := make([]byte, 100<<10)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	done := make(chan []byte)
	go func() {
		got := make([]byte, 0, len(msg))
		big := make([]byte, 40<<10)
		for len(got) < len(msg) {
			n, err := r.Read(big)
			if err != nil {
				break
			}
			got = append(got, big[:n]...)
		}
		done <- got
	}()
	if _, err := w.Write(msg); err != nil {
		t.Fatal(err)
	}
	if got := <-done; !bytes.Equal(got, msg) {
		t.Fatalf("read %d bytes, want the %d written, in order", len(got), len(msg))
	}
}

// TestYamuxSinkTakesFramesInOrder: a stream's sink (third_party/yamux's
// SetSink) gets, after the bytes buffered before it was set, every later
// byte in order, across window updates (the window is smaller than what
// is written); a Read then returns io.EOF only once the closing frame's
// bytes reached the sink. A sink's error ends the session.
func TestYamuxSinkTakesFramesInOrder(t *testing.T) {
	w, r := yamuxPair(t, 256<<10)
	rng := rand.New(rand.NewPCG(3, 4))
	want := make([]byte, 3<<20+5)
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	if _, err := w.Write(want[:1000]); err != nil {
		t.Fatal(err)
	}
	var one [1]byte
	if _, err := io.ReadFull(r, one[:]); err != nil || one[0] != want[0] {
		t.Fatalf("first byte: %v, %v", one[0], err)
	}
	got := bytes.NewBuffer(nil)
	var mu sync.Mutex
	before := r.SetSink(func(rd io.Reader, n int) error {
		mu.Lock()
		defer mu.Unlock()
		_, err := io.CopyN(got, rd, int64(n))
		return err
	})
	if !bytes.Equal(before, want[1:1000]) {
		t.Fatalf("SetSink returned %d buffered bytes, want the 999 not read", len(before))
	}
	errc := make(chan error, 1)
	go func() {
		for rest := want[1000:]; len(rest) > 0; {
			k := min(len(rest), 100<<10+7)
			if _, err := w.Write(rest[:k]); err != nil {
				errc <- err
				return
			}
			rest = rest[k:]
		}
		errc <- w.Close()
	}()
	if n, err := r.Read(one[:]); n != 0 || err != io.EOF {
		t.Fatalf("Read of a stream with a sink: %d, %v; want 0 and io.EOF at its close", n, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !bytes.Equal(append(before, got.Bytes()...), want[1:]) {
		t.Fatalf("the sink got %d bytes, want the %d written after the buffered ones, in order", got.Len(), len(want)-1000)
	}

	w, r = yamuxPair(t, 0)
	r.SetSink(func(rd io.Reader, n int) error {
		io.CopyN(io.Discard, rd, int64(n))
		return errors.New("bad frame")
	})
	// The frame's own Write may fail: the sessions can end before it
	// returns (the peer closes the connection as soon as it read it).
	w.Write([]byte{1, 2, 3})
	<-r.Session().CloseChan()
	if _, err := r.Read(one[:]); err == nil {
		t.Fatal("Read after the sink's error: no error")
	}
}

// TestYamuxSetSinkWhileFramesArrive: a sink set while the peer's frames
// keep arriving takes every byte the stream's buffer did not, in order,
// and a Read then waits for the stream's end. A frame whose receive loop
// looked for a sink just before SetSink set it was once copied into the
// buffer after SetSink had emptied it: a Read returned its first byte and
// the rest was lost (psgraph's message reader ended quietly, and a trainer
// waited forever for a pserver's reply: CI, stop 44).
func TestYamuxSetSinkWhileFramesArrive(t *testing.T) {
	client, server := yamuxSessions(t, 0)
	rounds := 300
	if testing.Short() {
		rounds = 60
	}
	for round := range rounds {
		w, r := yamuxStream(t, client, server)
		const frames, size = 400, 16
		errc := make(chan error, 1)
		go func() {
			var b [size]byte
			for i := range frames {
				for j := range b {
					b[j] = byte(i + j)
				}
				if _, err := w.Write(b[:]); err != nil { // one frame each
					errc <- err
					return
				}
			}
			errc <- w.Close()
		}()
		var one [1]byte
		if _, err := io.ReadFull(r, one[:]); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		got := []byte{one[0]}
		before := r.SetSink(func(rd io.Reader, n int) error {
			mu.Lock()
			defer mu.Unlock()
			k := len(got)
			got = append(got, make([]byte, n)...)
			_, err := io.ReadFull(rd, got[k:])
			return err
		})
		mu.Lock()
		got = append(got[:1], append(before, got[1:]...)...)
		mu.Unlock()
		n, err := r.Read(one[:])
		if werr := <-errc; werr != nil {
			t.Fatal(werr)
		}
		if n != 0 || err != io.EOF {
			t.Fatalf("round %d: Read of a stream with a sink: %d, %v; want 0 and io.EOF at its close", round, n, err)
		}
		mu.Lock()
		for i := range frames * size {
			if i >= len(got) || got[i] != byte(i/size+i%size) {
				t.Fatalf("round %d: %d bytes taken (%d before the sink), wrong or missing from byte %d of %d", round, len(got), len(before), i, frames*size)
			}
		}
		mu.Unlock()
	}
}
