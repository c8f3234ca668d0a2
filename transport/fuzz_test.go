package transport

import (
	"bytes"
	"io"
	"testing"
)

// FuzzFrameDecode feeds arbitrary bytes to a bulk stream's decoder and to
// a message stream's reader: they must never panic, never deliver a
// message that does not match the spec, and never allocate a payload
// larger than a spec allows.
func FuzzFrameDecode(f *testing.F) {
	frame := func(kind byte, dt DType, n int, step int64, payload ...byte) []byte {
		b := make([]byte, frameHeader)
		putHeader(b, header{kind: kind, dtype: dt, len: n, step: step})
		return append(b, payload...)
	}
	bind := func(id uint16, name string) []byte {
		return appendFrame(nil, header{kind: kindBind, id: id, len: len(name)}, name)
	}
	inline := func(id uint16, dt DType, step int64, payload ...byte) []byte {
		return appendFrame(nil, header{kind: kindData, id: id, dtype: dt, len: len(payload), step: step}, payload)
	}
	cat := func(bs ...[]byte) []byte {
		var b []byte
		for _, x := range bs {
			b = append(b, x...)
		}
		return b
	}
	f.Add(frame(kindData, F32, 8, 1, 1, 2, 3, 4, 5, 6, 7, 8))
	f.Add(frame(kindData, F32, 8, 1, 1, 2, 3))
	f.Add(frame(kindData, F32, 1<<30, 1))
	f.Add(frame(kindData, I32, 4, 0, 1, 2, 3, 4))
	f.Add(frame(kindDone, 0, 0, 3))
	f.Add(append(frame(kindData, F32, 8, 2, 1, 2, 3, 4, 5, 6, 7, 8), frame(kindData, F32, 8, 3, 8, 7, 6, 5, 4, 3, 2, 1)...))
	f.Add(frame(kindResume, 0, 18, 0, append([]byte{1, 'W'}, make([]byte, 16)...)...))
	f.Add(frame(kindAbort, 0, 4, 0, 'l', 'o', 's', 't'))
	at := frame(kindDataAt, F32, 4, 1)
	at = append(at, 4, 0, 0, 0, 0, 0, 0, 0, 5, 6, 7, 8)
	f.Add(at)
	f.Add([]byte{})
	f.Add([]byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"))
	// The message stream: binds, then small messages of several transfers
	// in one batch; an unbound id, a rebind, a data frame above maxInline.
	f.Add(cat(bind(1, "W"), bind(2, "V"), inline(1, F32, 1, 1, 2, 3, 4, 5, 6, 7, 8), inline(2, F32, 1, 1, 2, 3, 4), frame(kindDone, 0, 0, 2)))
	f.Add(cat(bind(1, "W"), inline(1, F32, 1, 1, 2, 3, 4, 5, 6, 7, 8), inline(1, F32, 2, 1, 2, 3, 4, 5, 6, 7, 8)))
	f.Add(cat(inline(1, F32, 1, 1, 2, 3, 4, 5, 6, 7, 8)))
	f.Add(cat(bind(1, "W"), bind(1, "V")))
	f.Add(cat(bind(1, "W"), appendFrame(nil, header{kind: kindData, id: 1, dtype: F32, len: maxInline + 1}, "")))
	f.Add(cat(bind(2, "W"), inline(2, F32, 1, 1, 2, 3, 4, 5, 6, 7, 8)))
	f.Fuzz(func(t *testing.T, data []byte) {
		// A bulk stream read ahead, one whose messages are all held (no
		// recv claims them and the connection is gone: each is parked),
		// and the message stream.
		dead := make(chan struct{})
		close(dead)
		for _, c := range []struct {
			bulk, held bool
		}{{true, false}, {true, true}, {false, false}} {
			var errs int
			in := newInbox(PServer(0), []NodeID{Trainer(0)}, func(error) { errs++ })
			in.accept([]Spec{{Var: "W", DType: F32, Bytes: 8}, {Var: "V", DType: F32, Bytes: 4, AtMost: true}})
			fr := frameReader{in: in, src: Trainer(0), maxFrame: 1 << 16}
			if c.held {
				in.eager, fr.dead = 0, dead
			}
			var err error
			if c.bulk {
				err = (&decoder{frameReader: fr, name: "W"}).run(bytes.NewReader(data))
			} else {
				m := &msgReader{frameReader: fr}
				err = m.run(bytes.NewReader(data))
				if len(m.names) > maxStreams || len(m.buf) > msgBufMax+frameHeader+maxInline {
					t.Fatalf("%d transfers bound, a %d-byte read buffer", len(m.names), len(m.buf))
				}
			}
			if err == nil {
				t.Fatal("run ends with an error (io.EOF at least)")
			}
			if err != io.EOF && len(data) == 0 {
				t.Fatalf("empty stream: %v", err)
			}
			for v, q := range in.vars {
				for _, e := range q.items {
					if e.h == nil && e.bad == nil && len(e.buf) != 8 && !(v == "V" && len(e.buf) <= 4) { // a rejected message is queued as its error only
						t.Fatalf("delivered %d bytes of %s", len(e.buf), v)
					}
				}
			}
			for n := range in.free {
				if n != sizeClass(8) {
					t.Fatalf("allocated a %d-byte buffer", n)
				}
			}
		}
	})
}

type fuzzConn struct {
	io.Reader
	io.Writer
}

// FuzzHandshake plays arbitrary bytes as the dialer to a listener and as
// the listener to a dialer: neither may panic, and neither may accept a
// peer that did not prove the token.
func FuzzHandshake(f *testing.F) {
	// A real client hello, and its truncations.
	var hb bytes.Buffer
	writeHello(&hb, false, &hello{job: jobHash("job"), id: Trainer(0)})
	f.Add(hb.Bytes())
	f.Add(hb.Bytes()[:10])
	f.Add(append(hb.Bytes(), make([]byte, 32)...))
	var sb bytes.Buffer
	writeHello(&sb, true, &hello{job: jobHash("job"), id: PServer(0)})
	f.Add(append(sb.Bytes(), make([]byte, 33)...))
	f.Add([]byte("PSGR\x03"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		job := jobHash("job")
		id, _, err := serverHandshake(fuzzConn{bytes.NewReader(data), io.Discard}, PServer(0), 7, []byte("tok"), job,
			func(NodeID) byte { return stOK })
		if err == nil {
			t.Fatalf("server accepted %q without the token", id)
		}
		if _, err := clientHandshake(fuzzConn{bytes.NewReader(data), io.Discard}, Trainer(0), PServer(0), 7, []byte("tok"), job); err == nil {
			t.Fatal("client accepted a listener without the token")
		}
	})
}
