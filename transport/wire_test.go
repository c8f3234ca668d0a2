package transport

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"io"
	"strings"
	"testing"
)

// The byte order of every multi-byte integer on the wire (docs/wire.md):
// little-endian in frames (header length and step, the data-at offset,
// resume entries), big-endian for the handshake's incarnations, on the
// wire and in the HMAC transcript. Each value's bytes differ, so a
// swapped order shows.
func TestWireByteOrder(t *testing.T) {
	const inc = 0x0102030405060708
	be := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	le := []byte{8, 7, 6, 5, 4, 3, 2, 1}

	// Handshake: magic(4) version(1) [status(1)] nonce(32) inc(8).
	job := jobHash("job")
	c := helloOf(Trainer(0))
	c.inc, c.job = inc, job
	s := helloOf(PServer(0))
	s.inc, s.job = inc+1, job
	for _, h := range []struct {
		server bool
		at     int
		hello  *hello
		want   []byte
	}{{false, 4 + 1 + 32, c, be}, {true, 4 + 1 + 1 + 32, s, []byte{1, 2, 3, 4, 5, 6, 7, 9}}} {
		var b bytes.Buffer
		must(t, writeHello(&b, h.server, h.hello))
		if got := b.Bytes()[h.at : h.at+8]; !bytes.Equal(got, h.want) {
			t.Fatalf("server %v hello: incarnation % x, want big-endian % x", h.server, got, h.want)
		}
		back, err := readHello(&b, h.server)
		must(t, err)
		if back.inc != h.hello.inc {
			t.Fatalf("server %v hello: read incarnation %#x back, want %#x", h.server, back.inc, h.hello.inc)
		}
	}
	// The transcript T = cnonce || snonce || cinc || sinc || job || len || cid || len || sid.
	m := hmac.New(sha256.New, []byte("tok"))
	m.Write([]byte("psgraph/1 client"))
	m.Write(c.nonce[:])
	m.Write(s.nonce[:])
	m.Write(be)
	m.Write([]byte{1, 2, 3, 4, 5, 6, 7, 9})
	m.Write(job[:])
	m.Write(append([]byte{byte(len(c.name))}, c.name...))
	m.Write(append([]byte{byte(len(s.name))}, s.name...))
	if !hmac.Equal(proof([]byte("tok"), "psgraph/1 client", c, s), m.Sum(nil)) {
		t.Fatal("the proof is not over the transcript with big-endian incarnations")
	}

	// Frame header: kind dtype flags(2) length(4) step(8).
	b := make([]byte, frameHeader)
	putHeader(b, header{kind: kindData, dtype: F32, len: 0x0a0b0c0d, step: inc})
	if !bytes.Equal(b[4:8], []byte{0x0d, 0x0c, 0x0b, 0x0a}) || !bytes.Equal(b[8:], le) {
		t.Fatalf("frame header % x: length and step not little-endian", b)
	}
	if h, err := parseHeader(b, false, 1<<30); err != nil || h.len != 0x0a0b0c0d || h.step != inc {
		t.Fatalf("parsed %+v, %v", h, err)
	}

	// Resume entry: u8 name length, name, u64 count, u64 offset.
	r := appendResume(nil, []resumePoint{{v: "W", count: inc, off: 0x1112131415161718}})
	if want := append(append([]byte{1, 'W'}, le...), 0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11); !bytes.Equal(r, want) {
		t.Fatalf("resume entry % x, want % x", r, want)
	}
	if rps, err := parseResume(r); err != nil || len(rps) != 1 || rps[0].count != inc || rps[0].off != 0x1112131415161718 {
		t.Fatalf("parsed %+v, %v", rps, err)
	}

	// Data at an offset: the header, then the u64 offset. A decoder reads
	// offset 4 from 04 00 .. 00 (big-endian it would be 4<<56, beyond any
	// frame); no message is pending, so it names the offset it read.
	in := newInbox(PServer(0), []NodeID{Trainer(0)}, nil)
	in.accept([]Spec{{Var: "W", DType: F32, Bytes: 12}})
	d := &decoder{frameReader: frameReader{in: in, src: Trainer(0), maxFrame: 1 << 20, dead: make(chan struct{})}, name: "W"}
	f := make([]byte, frameHeader, frameHeader+16)
	putHeader(f, header{kind: kindDataAt, dtype: F32, len: 8})
	f = append(f, 4, 0, 0, 0, 0, 0, 0, 0)
	f = append(f, make([]byte, 8)...)
	if err := d.run(bytes.NewReader(f)); err == nil || !strings.Contains(err.Error(), "resumed at byte 4, but no message of it is pending") {
		t.Fatalf("data at offset 04 00 00 00 00 00 00 00: %v", err)
	}
}

// Config.MaxFrame defaults to 1 GiB (what psgraph run uses: no flag sets
// it); a bound the 4-byte length field cannot carry falls back to it.
func TestConfigDefaultMaxFrame(t *testing.T) {
	for _, c := range []struct{ set, want int }{{0, 1 << 30}, {-1, 1 << 30}, {1 << 32, 1 << 30}, {1<<32 - 1, 1<<32 - 1}, {1 << 20, 1 << 20}} {
		cfg := Config{MaxFrame: c.set}
		cfg.defaults()
		if cfg.MaxFrame != c.want {
			t.Fatalf("MaxFrame %d: became %d, want %d", c.set, cfg.MaxFrame, c.want)
		}
	}
}

// The message stream's bytes of docs/wire.md's example: a first batch of
// b2@GRAD (40 bytes) and b1@GRAD (512 bytes) at step 7 is a bind and a
// data frame each, 630 bytes; at step 8 the two data frames alone, 584.
// The reader takes both batches back to the two transfers.
func TestMessageStreamBytes(t *testing.T) {
	w := &msgWriter{p: &peer{t: &TCP{}}, ids: map[string]uint16{}}
	b2, b1 := bytes.Repeat([]byte{0xb2}, 40), bytes.Repeat([]byte{0xb1}, 512)
	var got []byte
	for _, it := range []item{{kind: kindData, v: "b2@GRAD", dt: F32, step: 7, payload: b2}, {kind: kindData, v: "b1@GRAD", dt: F32, step: 7, payload: b1}} {
		got = w.encode(got, it)
	}
	zero8 := make([]byte, 8)
	want := append(append(append([]byte{6, 0, 1, 0, 7, 0, 0, 0}, zero8...), "b2@GRAD"...),
		append(append([]byte{1, 1, 1, 0, 0x28, 0, 0, 0}, 7, 0, 0, 0, 0, 0, 0, 0), b2...)...)
	want = append(append(append(want, 6, 0, 2, 0, 7, 0, 0, 0), zero8...), "b1@GRAD"...)
	want = append(append(want, 1, 1, 2, 0, 0, 2, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0), b1...)
	if len(got) != 630 || !bytes.Equal(got, want) {
		t.Fatalf("first batch: %d bytes\n% x\nwant %d bytes\n% x", len(got), got, len(want), want)
	}
	var next []byte
	for _, it := range []item{{kind: kindData, v: "b2@GRAD", dt: F32, step: 8, payload: b2}, {kind: kindData, v: "b1@GRAD", dt: F32, step: 8, payload: b1}} {
		next = w.encode(next, it)
	}
	if len(next) != 584 || !bytes.Equal(next[:8], []byte{1, 1, 1, 0, 0x28, 0, 0, 0}) || next[8] != 8 {
		t.Fatalf("second batch: %d bytes, % x...", len(next), next[:16])
	}
	in := newInbox(PServer(0), []NodeID{Trainer(0)}, nil)
	in.accept([]Spec{{Var: "b2@GRAD", DType: F32, Bytes: 40}, {Var: "b1@GRAD", DType: F32, Bytes: 512}})
	m := &msgReader{frameReader: frameReader{in: in, src: Trainer(0), maxFrame: 1 << 20}}
	if err := m.run(bytes.NewReader(append(got, next...))); err != io.EOF {
		t.Fatalf("reading both batches: %v", err)
	}
	ctx := context.Background()
	for _, step := range []int64{7, 8} {
		for v, p := range map[string][]byte{"b2@GRAD": b2, "b1@GRAD": b1} {
			dst := make([]byte, len(p))
			must(t, in.recv(ctx, Trainer(0), step, v, dst, nil))
			if !bytes.Equal(dst, p) {
				t.Fatalf("%s@%d arrived changed", v, step)
			}
		}
	}
}
