package transport

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// hostile authenticates as trainer-1 and returns a raw yamux session.
func hostile(t *testing.T, addr string, id NodeID) (*yamux.Session, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	must(t, err)
	_, err = clientHandshake(c, id, PServer(0), newIncarnation(), []byte("s3cret"), jobHash("job"))
	must(t, err)
	yc := yamux.DefaultConfig()
	yc.LogOutput = io.Discard
	s, err := yamux.Client(c, yc)
	must(t, err)
	t.Cleanup(func() { s.Close() })
	go func() { // take the pserver's streams (its resume frame), as a peer does
		for {
			st, err := s.AcceptStream()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, st)
		}
	}()
	return s, c
}

func TestTCPHostileFrames(t *testing.T) {
	ctx := context.Background()
	m, log := tcpJob(t, func(c *Config) {
		c.ReadTimeout = 300 * time.Millisecond
		c.MaxFrame = 1 << 20
		if c.Listen != "" { // the pserver also expects the hostile trainers 1..29
			for i := 1; i < 30; i++ {
				c.Peers[Trainer(i)] = ""
			}
		}
	}, Trainer(0), PServer(0))
	ps := m[PServer(0)]
	ps.Accept(Spec{Var: "W", DType: F32, Bytes: 8})
	addr := ps.Addr().String()
	good := func(step int64) {
		t.Helper()
		must(t, m[Trainer(0)].Send(ctx, PServer(0), step, "W", F32, f32(1, 2)))
		must(t, ps.Recv(ctx, Trainer(0), step, "W", make([]byte, 8)))
	}
	good(0)
	next := 1

	// 1. garbage instead of a handshake
	c, err := net.Dial("tcp", addr)
	must(t, err)
	c.Write([]byte("GET / HTTP/1.1\r\n\r\n garbage garbage garbage garbage garbage garbage garbage garbage"))
	if _, err := io.ReadAll(c); err != nil {
		t.Logf("read: %v", err)
	}
	c.Close()
	good(1)

	frame := func(kind byte, dt DType, n int, step int64) []byte {
		b := make([]byte, frameHeader)
		putHeader(b, header{kind: kind, dtype: dt, len: n, step: step})
		return b
	}
	// closesOn opens a stream with the given preamble (a bulk stream's
	// transfer name, or "" the message stream) and sends what breaks it.
	closesOn := func(stream, what string, send func(s *yamux.Session, st *yamux.Stream)) {
		t.Helper()
		before := log.count()
		s, _ := hostile(t, addr, Trainer(next))
		next++
		st, err := s.OpenStream()
		must(t, err)
		st.Write(append([]byte{byte(len(stream))}, stream...))
		send(s, st)
		select {
		case <-s.CloseChan():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the connection stayed open", what)
		}
		// The message stream's reader (a sink in yamux's receive loop)
		// ends the session first and reports from its stream's goroutine.
		waitFor(t, what+" to be reported", func() bool { return log.count() > before })
		waitFor(t, "the hostile connection to be dropped", func() bool { return ps.Stats().Connections == 1 })
		good(2)
	}
	closes := func(what string, send func(st *yamux.Stream)) {
		t.Helper()
		closesOn("W", what, func(_ *yamux.Session, st *yamux.Stream) { send(st) })
	}
	closes("oversized", func(st *yamux.Stream) { st.Write(frame(kindData, F32, 1<<30, 5)) })
	closes("bad kind", func(st *yamux.Stream) { st.Write(frame(9, F32, 8, 5)) })
	closes("partial header", func(st *yamux.Stream) { st.Write(frame(kindData, F32, 8, 5)[:7]) })
	closes("partial payload", func(st *yamux.Stream) { st.Write(append(frame(kindData, F32, 8, 5), 1, 2, 3)) })
	closes("garbage", func(st *yamux.Stream) {
		st.Write([]byte("\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6\xf5\xf4\xf3\xf2\xf1\xf0"))
	})
	closes("flags on a bulk stream", func(st *yamux.Stream) {
		b := frame(kindData, F32, 8, 5)
		b[2] = 1
		st.Write(append(b, make([]byte, 8)...))
	})
	bind := func(id uint16, name string) []byte {
		return appendFrame(nil, header{kind: kindBind, id: id, len: len(name)}, name)
	}
	inline := func(id uint16, n int) []byte {
		return appendFrame(nil, header{kind: kindData, id: id, dtype: F32, len: n, step: 5}, make([]byte, n))
	}
	msg := func(what string, b []byte) {
		t.Helper()
		closesOn("", what, func(_ *yamux.Session, st *yamux.Stream) { st.Write(b) })
	}
	msg("an unbound transfer id", inline(1, 8))
	msg("a bind out of order", append(bind(2, "W"), inline(2, 8)...))
	msg("a transfer bound twice", append(bind(1, "W"), bind(1, "V")...))
	msg("a name above 255 bytes", appendFrame(nil, header{kind: kindBind, id: 1, len: 256}, make([]byte, 256)))
	msg("an inline payload above 64 KiB", append(bind(1, "W"), appendFrame(nil, header{kind: kindData, id: 1, dtype: F32, len: maxInline + 1}, "")...))
	msg("a bulk frame kind on the message stream", frame(kindDataAt, F32, 8, 5))
	msg("a transfer id on a done frame", appendFrame(nil, header{kind: kindDone, id: 3}, ""))
	closesOn("", "a second message stream", func(s *yamux.Session, _ *yamux.Stream) {
		st, err := s.OpenStream()
		must(t, err)
		st.Write([]byte{0})
	})
	closesOn("W", "a second bulk stream of a transfer", func(s *yamux.Session, _ *yamux.Stream) {
		st, err := s.OpenStream()
		must(t, err)
		st.Write([]byte{1, 'W'})
	})
	if ps.Stats().Connections != 1 {
		t.Fatalf("the good peer must stay connected: %+v", ps.Stats())
	}
}
