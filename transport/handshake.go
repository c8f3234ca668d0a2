package transport

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/psgraph/psgraph/dsl/ir"
)

// Handshake (docs/wire.md), before any yamux byte:
//
//	C->S hello  "PSGR" ver(1) nonce(32) inc(8) jobhash(32) idlen(1) id
//	S->C hello  "PSGR" ver(1) status(1) nonce(32) inc(8) jobhash(32) idlen(1) id
//	C->S proof  HMAC-SHA256(token, "psgraph/1 client" || transcript)
//	S->C final  status(1) HMAC-SHA256(token, "psgraph/1 server" || transcript)
//
// transcript = cnonce || snonce || cinc || sinc || jobhash || idlen || cid || idlen || sid.
// inc is the sender's incarnation (random per endpoint, big-endian).
const (
	hsMagic   = "PSGR"
	hsVersion = 4 // 4: the message stream (docs/wire.md, section 3)

	stOK          = 0
	stVersion     = 1
	stJob         = 2
	stAuth        = 3
	stUnknownPeer = 4
	stDuplicate   = 5
)

var (
	// ErrAuth: the peer does not hold the job's token (or we do not).
	ErrAuth = errors.New("transport: authentication failed")
	// ErrJobMismatch: the peer belongs to another job (another plan hash).
	ErrJobMismatch = errors.New("transport: peer belongs to another job")
	// ErrRefused: the peer refused this node (unknown id, already connected, version).
	ErrRefused = errors.New("transport: connection refused by peer")
	// ErrNoToken: Listen on a non-loopback address without a token and
	// without Config.Insecure.
	ErrNoToken = errors.New("transport: refusing to listen beyond loopback without a token")
)

// errDuplicate: the listener holds a live connection of this node.
var errDuplicate = errors.New("already connected")

// newIncarnation picks an endpoint's random, non-zero incarnation.
func newIncarnation() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:])
		if v := binary.BigEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

func jobHash(s string) [32]byte { return sha256.Sum256([]byte(s)) }

type hello struct {
	status byte
	nonce  [32]byte
	inc    uint64
	job    [32]byte
	id     NodeID // name read as a node (ir.ParseNode; a malformed name: none)
	name   string // the node's name as it is on the wire
	srvInc uint64 // the client's record of the server's incarnation
}

func helloOf(id NodeID) *hello { return &hello{id: id, name: id.String()} }

func writeHello(w io.Writer, server bool, h *hello) error {
	b := make([]byte, 0, 4+1+1+32+8+32+1+len(h.name))
	b = append(b, hsMagic...)
	b = append(b, hsVersion)
	if server {
		b = append(b, h.status)
	}
	b = append(b, h.nonce[:]...)
	b = binary.BigEndian.AppendUint64(b, h.inc)
	b = append(b, h.job[:]...)
	b = append(b, byte(len(h.name)))
	b = append(b, h.name...)
	_, err := w.Write(b)
	return err
}

func readHello(r io.Reader, server bool) (*hello, error) {
	n := 4 + 1 + 32 + 8 + 32 + 1
	if server {
		n++
	}
	b := make([]byte, n)
	// The magic first: a stranger (an HTTP request, a port scan) is
	// refused at its first bytes, not after the handshake timeout.
	if _, err := io.ReadFull(r, b[:4]); err != nil {
		return nil, fmt.Errorf("handshake: %w", err)
	}
	if string(b[:4]) != hsMagic {
		return nil, fmt.Errorf("handshake: not a psgraph peer")
	}
	if _, err := io.ReadFull(r, b[4:]); err != nil {
		return nil, fmt.Errorf("handshake: %w", err)
	}
	h := &hello{}
	if b[4] != hsVersion {
		h.status = stVersion
	}
	b = b[5:]
	if server {
		if h.status == stOK {
			h.status = b[0]
		}
		b = b[1:]
	}
	copy(h.nonce[:], b[:32])
	h.inc = binary.BigEndian.Uint64(b[32:40])
	b = b[8:]
	copy(h.job[:], b[32:64])
	id := make([]byte, b[64])
	if _, err := io.ReadFull(r, id); err != nil {
		return nil, fmt.Errorf("handshake: %w", err)
	}
	h.name = string(id)
	h.id, _ = ir.ParseNode(h.name)
	return h, nil
}

func proof(token []byte, label string, c, s *hello) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte(label))
	m.Write(c.nonce[:])
	m.Write(s.nonce[:])
	m.Write(binary.BigEndian.AppendUint64(nil, c.inc))
	m.Write(binary.BigEndian.AppendUint64(nil, s.inc))
	m.Write(c.job[:])
	m.Write([]byte{byte(len(c.name))})
	m.Write([]byte(c.name))
	m.Write([]byte{byte(len(s.name))})
	m.Write([]byte(s.name))
	return m.Sum(nil)
}

func statusErr(st byte) error {
	switch st {
	case stOK:
		return nil
	case stAuth:
		return ErrAuth
	case stJob:
		return ErrJobMismatch
	case stUnknownPeer:
		return fmt.Errorf("%w: not a peer it expects", ErrRefused)
	case stDuplicate:
		return fmt.Errorf("%w: %w", ErrRefused, errDuplicate)
	case stVersion:
		return fmt.Errorf("%w: protocol version", ErrRefused)
	}
	return fmt.Errorf("%w: status %d", ErrRefused, st)
}

// clientHandshake authenticates to a listener that must be want; inc is
// this endpoint's incarnation. It returns the listener's.
func clientHandshake(rw io.ReadWriter, self, want NodeID, inc uint64, token []byte, job [32]byte) (uint64, error) {
	c := helloOf(self)
	c.job, c.inc = job, inc
	if _, err := rand.Read(c.nonce[:]); err != nil {
		return 0, err
	}
	err := clientRest(rw, c, want, token, job)
	return c.srvInc, err
}

func clientRest(rw io.ReadWriter, c *hello, want NodeID, token []byte, job [32]byte) error {
	if err := writeHello(rw, false, c); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	s, err := readHello(rw, true)
	if err != nil {
		return err
	}
	if err := statusErr(s.status); err != nil {
		return err
	}
	if s.job != job {
		return ErrJobMismatch
	}
	if s.id != want || s.name != want.String() {
		return fmt.Errorf("%w: the address is %q, not %q", ErrRefused, s.name, want)
	}
	if _, err := rw.Write(proof(token, "psgraph/1 client", c, s)); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	var fin [1 + sha256.Size]byte
	if _, err := io.ReadFull(rw, fin[:1]); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if err := statusErr(fin[0]); err != nil {
		return err
	}
	if _, err := io.ReadFull(rw, fin[1:]); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if !hmac.Equal(fin[1:], proof(token, "psgraph/1 server", c, s)) {
		return ErrAuth // the listener does not hold the token
	}
	c.srvInc = s.inc
	return nil
}

// serverHandshake authenticates a dialer; admit decides (after the proof
// checked out) whether that node may connect and returns a status. inc is
// this endpoint's incarnation; it returns the dialer's id and incarnation.
func serverHandshake(rw io.ReadWriter, self NodeID, inc uint64, token []byte, job [32]byte, admit func(NodeID) byte) (NodeID, uint64, error) {
	id, c, err := serverRest(rw, self, inc, token, job, admit)
	var ci uint64
	if c != nil {
		ci = c.inc
	}
	return id, ci, err
}

func serverRest(rw io.ReadWriter, self NodeID, inc uint64, token []byte, job [32]byte, admit func(NodeID) byte) (NodeID, *hello, error) {
	c, err := readHello(rw, false)
	if err != nil {
		return NodeID{}, nil, err
	}
	s := helloOf(self)
	s.job, s.status, s.inc = job, c.status, inc
	if _, err := rand.Read(s.nonce[:]); err != nil {
		return NodeID{}, nil, err
	}
	if s.status == stOK && c.job != job {
		s.status = stJob
	}
	if err := writeHello(rw, true, s); err != nil {
		return NodeID{}, nil, fmt.Errorf("handshake: %w", err)
	}
	if s.status != stOK {
		return c.id, nil, fmt.Errorf("handshake from %q: %w", c.name, statusErr(s.status))
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(rw, got); err != nil {
		return c.id, nil, fmt.Errorf("handshake from %q: %w", c.name, err)
	}
	st := byte(stOK)
	if !hmac.Equal(got, proof(token, "psgraph/1 client", c, s)) {
		st = stAuth
	} else {
		st = admit(c.id)
	}
	if st != stOK {
		rw.Write([]byte{st})
		return c.id, nil, fmt.Errorf("handshake from %q: %w", c.name, statusErr(st))
	}
	if _, err := rw.Write(append([]byte{stOK}, proof(token, "psgraph/1 server", c, s)...)); err != nil {
		return c.id, nil, fmt.Errorf("handshake: %w", err)
	}
	return c.id, c, nil
}
