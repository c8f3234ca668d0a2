package transport

// The TCP endpoint: its Config and defaults, the TCP and peer types,
// Listen and Dial, the Endpoint methods (Send, Done, Abort queue to a
// peer's writers; Recv and the rest read the inbox), Flush and Close.
// Connections are in conn.go, the writers in writer.go, TLS in tls.go.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/rs/zerolog"
)

// Config configures a TCP endpoint. Zero values take the defaults below.
type Config struct {
	// Self is this node's id.
	Self NodeID
	// Listen is the address a pserver listens on ("127.0.0.1:0" picks a
	// port; "unix:PATH" is a Unix-domain socket, addr.go).
	Listen string
	// Peers are the nodes this one talks to. For Dial (trainers): pserver
	// id -> address. For Listen (pservers): the trainer ids it expects
	// (addresses ignored); any other node is refused.
	Peers map[NodeID]string
	// Token is the job's shared secret; both sides must hold the same one.
	// Empty on both sides is allowed, but Listen refuses a non-loopback
	// address without a token unless Insecure.
	Token    []byte
	Insecure bool
	// JobHash names the job (e.g. the plan's hash): a peer of another job
	// is refused with ErrJobMismatch.
	JobHash string
	// MaxFrame bounds a payload (default 1 GiB, at most 4 GiB-1).
	MaxFrame int
	// QueueDepth bounds the messages queued to one peer (default 64);
	// Send blocks when it is full.
	QueueDepth int
	// ConnectTimeout bounds Dial's retries (default 60 s).
	ConnectTimeout time.Duration
	// HandshakeTimeout bounds the handshake (default 10 s).
	HandshakeTimeout time.Duration
	// ReadTimeout: a frame that started arriving must make progress
	// within it, or the connection is closed as a slow sender (default 30 s).
	ReadTimeout time.Duration
	// KeepAlive is yamux's ping interval; a connection silent for three
	// intervals is dead (default 10 s).
	KeepAlive time.Duration
	// StreamWindow is yamux's per-stream window (default 4 MiB): what a
	// stream buffers ahead of its reader at most.
	StreamWindow uint32
	// EagerBytes: payloads up to this size are read ahead of their recv
	// into recycled buffers; larger ones wait in the stream until a recv
	// claims them and are read straight into its memory (default 64 KiB).
	EagerBytes int
	// Keep is how many written messages per transfer are kept (as
	// references to the caller's memory) to be written again after a lost
	// connection (default QueueDepth).
	Keep int
	// CloseTimeout bounds Close's flush (default 10 s).
	CloseTimeout time.Duration
	// HangupWait, on a listener, has Close wait up to this long (within
	// CloseTimeout) until every peer that dialed it and said Done said
	// goodbye: Done again, which a dialer says once it has this node's
	// Done (WaitDone) or as it closes. A peer whose connection was cut
	// before that Done arrived redials to collect it (written again from
	// the send log), and would otherwise wait its whole ConnectTimeout for
	// a node that closed meanwhile. A goodbye lost in a cut of its own
	// costs this node the wait. Set where the peers close on their own (a
	// pserver's trainers), not where one goroutine closes both ends in
	// turn (0: no wait).
	HangupWait time.Duration
	// TLS, when set, wraps every connection in TLS before the handshake
	// (which still authenticates with the token): a server config with a
	// certificate for Listen (set ClientCAs and ClientAuth to require
	// client certificates), a client config with RootCAs for Dial.
	TLS *tls.Config
	// Accept declares the transfers this node receives before any peer can
	// send (the same as calling Accept, without the race against a peer
	// that sends as soon as it is connected).
	Accept []Spec
	// Replicas, when set on a listener, takes the connections of serving
	// replicas (role replica): authenticated by the handshake as any peer
	// (the job's token and hash), then handed over whole, never a peer of
	// the endpoint: nothing a replica writes reaches its inbox
	// (replica.go). Unset, a replica is refused as an unknown peer.
	Replicas func(id NodeID, inc uint64, c net.Conn)
	// OnError receives rejected messages and failed connections.
	OnError func(error)
	// Log receives connection events (nil: silent).
	Log *zerolog.Logger
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ConnectTimeout, 60*time.Second)
	def(&c.HandshakeTimeout, 10*time.Second)
	def(&c.ReadTimeout, 30*time.Second)
	def(&c.KeepAlive, 10*time.Second)
	def(&c.CloseTimeout, 10*time.Second)
	if c.MaxFrame <= 0 || c.MaxFrame > 1<<32-1 {
		c.MaxFrame = 1 << 30
	}
	if c.QueueDepth <= 0 {
		c.QueueDepth = 64
	}
	if c.StreamWindow < 256<<10 {
		c.StreamWindow = 4 << 20
	}
	if c.EagerBytes == 0 {
		c.EagerBytes = defaultEager
	}
	if c.Keep <= 0 {
		c.Keep = c.QueueDepth
	}
	if c.Log == nil {
		l := zerolog.Nop()
		c.Log = &l
	}
}

// maxStreams bounds the streams a peer may open on one connection.
const maxStreams = 4096

// Stats counts a TCP endpoint's traffic.
type Stats struct {
	Connections          int   // established connections now
	BytesSent, BytesRecv int64 // on the wire after the handshake, yamux included (Traffic.WireSent, WireRecv)
	MsgsSent, MsgsRecv   int64 // data messages written / delivered
	// BatchesSent counts the message streams' writes: each carries every
	// small message (and Done, Abort) queued to its peer when it began.
	// BatchesRecv counts the yamux frames of the message streams read:
	// a batch is one frame (up to the stream window).
	BatchesSent, BatchesRecv int64
}

// TCP is the TCP implementation of Endpoint: one connection carrying one
// yamux session per (trainer, pserver) pair, a stream per transfer name and
// direction. Trainers Dial, pservers Listen; both then behave alike.
type TCP struct {
	cfg   Config
	job   [32]byte
	in    *inbox
	ln    net.Listener
	peers map[NodeID]*peer

	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	inc uint64 // this endpoint's incarnation

	holdDial chan struct{} // tests: dials wait for it

	mu      sync.Mutex
	pending int
	waiters []chan struct{}
	free    []chan struct{}
	lostCh  chan struct{} // closed (and replaced) whenever a connection is lost
	hs      map[net.Conn]struct{}

	conns                    atomic.Int64
	bytesSent, bytesRecv     atomic.Int64 // every byte of the connections (coalescingConn)
	payloadSent, payloadRecv atomic.Int64 // data message bodies (writer.write, decoder)
	msgsSent, msgsRecv       atomic.Int64
	batchesSent, batchesRecv atomic.Int64 // message stream writes, reads
	inline                   int          // data payloads up to this go on the message stream (-1: none)
}

type peer struct {
	t       *TCP
	id      NodeID
	addr    string
	slots   chan struct{}
	sent    atomic.Int64 // data messages queued to this peer (this incarnation of it)
	lost    atomic.Int64 // queued messages dropped because the peer is gone for good
	pending atomic.Int64 // queued messages not yet written or dropped
	state   atomic.Int32 // connNever, connUp or connDown
	said    atomic.Bool  // this node said Done to the peer
	bye     atomic.Bool  // and Done again, its goodbye (sayBye)

	mu        sync.Mutex
	sess      *yamux.Session
	cur       *conn
	last      *conn         // the newest connection, live or not
	attaching bool          // a connection is being set up
	inc       uint64        // the peer's incarnation (0: never connected)
	epoch     int64         // bumped when the peer restarts; older queued items are dropped
	change    chan struct{} // closed (and replaced) when sess changes
	dialFail  chan struct{} // closed (and replaced) when a dial to the peer fails
	gone      chan struct{} // closed when a dialer gives the peer up for good
	err       error
	writers   map[string]*writer // bulk streams' writers, by transfer
	mw        *msgWriter         // the message stream's writer
}

// A peer's connection state (peer.state).
const (
	connNever int32 = iota // not connected yet: sends to it wait in the queue
	connUp
	connDown // a session was lost and none replaced it yet
)

func newTCP(cfg Config) (*TCP, error) {
	cfg.defaults()
	if !cfg.Self.Valid() || cfg.Self.Index < 0 {
		return nil, errors.New("transport: Config.Self names no node")
	}
	t := &TCP{cfg: cfg, job: jobHash(cfg.JobHash), peers: map[NodeID]*peer{},
		closing: make(chan struct{}), hs: map[net.Conn]struct{}{}, lostCh: make(chan struct{}), inc: newIncarnation()}
	if cfg.TLS != nil {
		addrs := []string{cfg.Listen}
		for _, a := range cfg.Peers {
			addrs = append(addrs, a)
		}
		for _, addr := range addrs {
			if network, _ := splitAddr(addr); network == "unix" {
				return nil, fmt.Errorf("transport: TLS on the Unix socket %s: only this host's processes reach it, and TLS needs a host name to verify; use a TCP address for TLS, or the socket without it", addr)
			}
		}
	}
	var ids []NodeID
	for id, addr := range cfg.Peers {
		if !id.Valid() || id.Index < 0 || len(id.String()) > maxName {
			return nil, fmt.Errorf("transport: bad node id %v", id)
		}
		ids = append(ids, id)
		t.peers[id] = &peer{t: t, id: id, addr: addr, slots: make(chan struct{}, cfg.QueueDepth),
			change: make(chan struct{}), dialFail: make(chan struct{}), gone: make(chan struct{}), writers: map[string]*writer{}}
	}
	t.inline = min(cfg.EagerBytes, maxInline)
	if cfg.EagerBytes < 0 {
		t.inline = -1
	}
	t.in = newInbox(cfg.Self, ids, cfg.OnError)
	t.in.onBye = t.wakeFlush
	t.in.eager = max(cfg.EagerBytes, 0)
	t.in.accept(cfg.Accept)
	return t, nil
}

// Listen starts a pserver endpoint: it accepts the trainers in cfg.Peers
// as they connect (in any order) and returns at once. Sends to a trainer
// that has not connected yet are queued until it does.
func Listen(ctx context.Context, cfg Config) (*TCP, error) {
	t, err := newTCP(cfg)
	if err != nil {
		return nil, err
	}
	if len(t.cfg.Token) == 0 && !t.cfg.Insecure && !local(t.cfg.Listen) {
		return nil, fmt.Errorf("%w: %s (set Config.Token, or Config.Insecure)", ErrNoToken, t.cfg.Listen)
	}
	t.ln, err = listen(ctx, t.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	t.wg.Add(1)
	go t.acceptLoop()
	return t, nil
}

// Dial starts a trainer endpoint: it connects to every pserver in
// cfg.Peers, retrying with backoff until cfg.ConnectTimeout, and returns
// once all are connected. Authentication and job mismatches are not
// retried (ErrAuth, ErrJobMismatch, ErrRefused).
func Dial(ctx context.Context, cfg Config) (*TCP, error) {
	t, err := newTCP(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.ConnectTimeout)
	defer cancel()
	errs := make(chan error, len(t.peers))
	for _, p := range t.peers {
		go func() { errs <- t.dialPeer(ctx, p) }()
	}
	var first error
	for range t.peers {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	if first != nil {
		t.Close()
		return nil, first
	}
	return t, nil
}

func (t *TCP) Self() NodeID          { return t.cfg.Self }
func (t *TCP) Accept(specs ...Spec)  { t.in.accept(specs) }
func (t *TCP) DropBefore(step int64) { t.in.dropBefore(step) }

// Addr is the listening address (nil for a dialer).
func (t *TCP) Addr() net.Addr {
	if t.ln == nil {
		return nil
	}
	return t.ln.Addr()
}

// Stats returns the endpoint's counters.
func (t *TCP) Stats() Stats {
	return Stats{Connections: int(t.conns.Load()), BytesSent: t.bytesSent.Load(), BytesRecv: t.bytesRecv.Load(),
		MsgsSent: t.msgsSent.Load(), MsgsRecv: t.msgsRecv.Load(), BatchesSent: t.batchesSent.Load(), BatchesRecv: t.batchesRecv.Load()}
}

// Traffic reports the payload and wire bytes this endpoint moved so far.
func (t *TCP) Traffic() Traffic {
	return Traffic{Sent: t.payloadSent.Load(), Recv: t.payloadRecv.Load(), WireSent: t.bytesSent.Load(), WireRecv: t.bytesRecv.Load()}
}

func (t *TCP) Recv(ctx context.Context, src NodeID, step int64, v string, dst []byte) error {
	return t.in.recv(ctx, src, step, v, dst, nil)
}

func (t *TCP) RecvSink(ctx context.Context, src NodeID, step int64, v string, sink Sink) error {
	return t.in.recv(ctx, src, step, v, nil, sink)
}

func (t *TCP) RecvAny(ctx context.Context, v string, dst []byte) (Key, error) {
	return t.in.recvAny(ctx, v, dst, nil)
}

func (t *TCP) Pending(ctx context.Context, vs []string) (string, error) {
	return t.in.pending(ctx, vs)
}

func (t *TCP) RecvAnySink(ctx context.Context, v string, sink Sink) (Key, error) {
	return t.in.recvAny(ctx, v, nil, sink)
}

// Send queues the message on the stream of v to peer to. The payload is
// written from the caller's memory by that stream's writer goroutine.
func (t *TCP) Send(ctx context.Context, to NodeID, step int64, v string, dt DType, payload []byte) error {
	if len(v) == 0 || len(v) > maxName {
		return fmt.Errorf("transport: transfer name %q: want 1..%d bytes", v, maxName)
	}
	if len(payload) > t.cfg.MaxFrame {
		return fmt.Errorf("transport: %s@%d: %d bytes above MaxFrame %d", v, step, len(payload), t.cfg.MaxFrame)
	}
	return t.enqueue(ctx, to, v, item{kind: kindData, step: step, dt: dt, payload: payload})
}

// Done queues a done frame carrying the count of data messages sent to to.
func (t *TCP) Done(ctx context.Context, to NodeID) error {
	p := t.peers[to]
	if p == nil {
		return &PeerError{to, ErrUnknownPeer}
	}
	p.said.Store(true)
	return t.enqueue(ctx, to, "", item{kind: kindDone, step: p.sent.Load()})
}

// Abort queues an abort frame: to's recvs from this node fail with an
// Aborted carrying reason.
func (t *TCP) Abort(ctx context.Context, to NodeID, reason string) error {
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	return t.enqueue(ctx, to, "", item{kind: kindAbort, payload: []byte(reason)})
}

func (t *TCP) WaitDone(ctx context.Context, peer NodeID) error {
	err := t.in.waitDone(ctx, peer)
	if p := t.peers[peer]; err == nil && p != nil && p.addr != "" {
		t.sayBye(ctx, p) // both are done: this node needs nothing more of it
	}
	return err
}

// sayBye tells listener p, once, after this node said Done to it and has
// its Done, that this node hangs up: a second Done, which a listener with
// Config.HangupWait waits for before it closes. It is kept and written
// again after a cut like any message, so a trainer that lost its
// connection after the pserver's Done redials to deliver it.
func (t *TCP) sayBye(ctx context.Context, p *peer) {
	if p.said.Load() && p.bye.CompareAndSwap(false, true) {
		t.enqueue(ctx, p.id, "", item{kind: kindDone, step: p.sent.Load()})
	}
}

// WaitPeer blocks until peer is connected (again).
func (t *TCP) WaitPeer(ctx context.Context, peer NodeID) error {
	if p := t.peers[peer]; p != nil {
		select {
		case <-p.gone:
			return t.peerErr(p)
		default:
		}
	}
	return t.in.waitPeer(ctx, peer)
}

// Restarts reports how often peer came back as a new incarnation.
func (t *TCP) Restarts(peer NodeID) (int64, <-chan struct{}) { return t.in.restarts(peer) }

// Peek blocks until a message of v from src is pending and returns the
// step of the oldest one.
func (t *TCP) Peek(ctx context.Context, src NodeID, v string) (int64, error) {
	return t.in.peek(ctx, src, v)
}

func (t *TCP) enqueue(ctx context.Context, to NodeID, v string, it item) error {
	p := t.peers[to]
	if p == nil {
		return &PeerError{to, ErrUnknownPeer}
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-t.closing:
		return ErrClosed
	case <-p.gone:
		return t.peerErr(p)
	}
	it.v = v
	bulk := it.kind == kindData && len(it.payload) > t.inline
	p.mu.Lock()
	w, mw := p.writers[v], p.mw
	if (bulk && w == nil) || (!bulk && mw == nil) {
		select {
		case <-t.closing:
			p.mu.Unlock()
			<-p.slots
			return ErrClosed
		default:
		}
		if bulk {
			w = newWriter(p, v)
			p.writers[v] = w
			t.wg.Add(1)
			go w.run()
		} else {
			mw = newMsgWriter(p)
			p.mw = mw
			t.wg.Add(1)
			go mw.run()
		}
	}
	if (bulk && w.dead) || (!bulk && mw.dead) {
		p.mu.Unlock()
		<-p.slots
		return t.peerErr(p)
	}
	if it.kind == kindData {
		p.sent.Add(1)
	}
	it.epoch = p.epoch
	p.pending.Add(1)
	t.mu.Lock()
	t.pending++
	t.mu.Unlock()
	direct := false
	if bulk {
		w.q <- it
	} else {
		direct = mw.add(it)
	}
	p.mu.Unlock()
	if direct {
		mw.direct(it)
	}
	return nil
}

func (t *TCP) peerErr(p *peer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == ErrClosed {
		return ErrClosed
	}
	if p.err == nil {
		return &PeerError{p.id, errors.New("connection lost")}
	}
	return &PeerError{p.id, p.err}
}

// finish marks one queued item to p as written (or dropped).
func (t *TCP) finish(p *peer) {
	<-p.slots
	left := p.pending.Add(-1)
	t.mu.Lock()
	t.pending--
	if t.pending == 0 || left == 0 { // flush(live) waits per peer
		t.wakeFlushLocked()
	}
	t.mu.Unlock()
}

// wakeFlush wakes the flushes waiting (a goodbye arrived: Close's may end).
func (t *TCP) wakeFlush() {
	t.mu.Lock()
	t.wakeFlushLocked()
	t.mu.Unlock()
}

func (t *TCP) wakeFlushLocked() {
	for _, c := range t.waiters {
		c <- struct{}{}
	}
	t.waiters = t.waiters[:0]
}

// Flush waits until every message queued so far was written. It fails
// with the peer's error when a peer that messages are queued for is not
// connected (they stay queued: once it is back, Flush again), or was given
// up with messages queued for it.
func (t *TCP) Flush(ctx context.Context) error { return t.flush(ctx, false) }

// redialed waits until p, lost, is connected again; false once a dial to
// it failed (nobody listens: it closed) or ctx ended.
func (t *TCP) redialed(ctx context.Context, p *peer) bool {
	for {
		p.mu.Lock()
		up, change, fail := p.sess != nil, p.change, p.dialFail
		p.mu.Unlock()
		if up {
			return true
		}
		select {
		case <-change:
		case <-fail:
			return false
		case <-p.gone:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// flush waits until what was queued is written. With live, peers that are
// not connected are skipped instead of failing it (Close: what can still
// be said, such as an abort's reason, reaches the peers that are there).
func (t *TCP) flush(ctx context.Context, live bool) error {
	var hangupEnd <-chan struct{} // closed once HangupWait passed
	if live && t.cfg.HangupWait > 0 {
		hctx, cancel := context.WithTimeout(ctx, t.cfg.HangupWait)
		defer cancel()
		hangupEnd = hctx.Done()
	}
	for {
		hangup := false
		if hangupEnd != nil {
			select {
			case <-hangupEnd:
				hangupEnd = nil // then wait as without it
			default:
				hangup = true
			}
		}
		// live (Close): a peer not connected now is not waited for, except
		// within HangupWait one that dials this node and finished (its Done
		// arrived), until it said goodbye.
		var finished map[NodeID]bool
		if hangup {
			for id, p := range t.peers {
				if p.addr == "" && t.in.awaitsBye(id) {
					if finished == nil {
						finished = map[NodeID]bool{}
					}
					finished[id] = true
				}
			}
		}
		t.mu.Lock()
		waiting := false
		for id, p := range t.peers {
			st := p.state.Load()
			gone := p.lost.Load() > 0 || (st == connDown && p.pending.Load() > 0)
			if gone && !live {
				t.mu.Unlock()
				return t.peerErr(p)
			}
			switch {
			case !live, p.lost.Load() > 0:
			case finished[id]:
				waiting = true
			default:
				waiting = waiting || (st == connUp && p.pending.Load() > 0)
			}
		}
		if (!live && t.pending == 0) || (live && !waiting) {
			t.mu.Unlock()
			return nil
		}
		var c chan struct{}
		if n := len(t.free); n > 0 {
			c, t.free = t.free[n-1], t.free[:n-1]
		} else {
			c = make(chan struct{}, 1)
		}
		t.waiters = append(t.waiters, c)
		lost := t.lostCh
		t.mu.Unlock()
		var err error
		select {
		case <-c:
		case <-lost:
		case <-hangupEnd:
		case <-ctx.Done():
			err = ctx.Err()
		}
		t.mu.Lock()
		for i, w := range t.waiters {
			if w == c {
				t.waiters = append(t.waiters[:i], t.waiters[i+1:]...)
				break
			}
		}
		select {
		case <-c:
		default:
		}
		t.free = append(t.free, c)
		t.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// Close flushes what was queued to the connected peers (within
// CloseTimeout), then closes every
// connection and waits for all of the endpoint's goroutines. Blocked calls
// fail with ErrClosed. It is idempotent.
func (t *TCP) Close() error {
	t.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), t.cfg.CloseTimeout)
		for id, p := range t.peers {
			// Goodbye to the listeners not yet told, or told but not yet
			// written to (sayBye); to one that finished (it waits for it)
			// over a redial of a cut connection, unless the redial fails.
			if p.addr == "" || !p.said.Load() || (p.bye.Load() && p.pending.Load() == 0) {
				continue
			}
			if p.state.Load() != connUp && (!t.in.finishedPeer(id) || !t.redialed(ctx, p)) {
				continue
			}
			t.sayBye(ctx, p)
		}
		t.flush(ctx, true)
		cancel()
		t.mu.Lock()
		close(t.closing)
		for c := range t.hs {
			c.Close()
		}
		t.mu.Unlock()
		if t.ln != nil {
			t.ln.Close()
		}
		t.in.close()
		t.wg.Wait()
	})
	return nil
}

var _ Endpoint = (*TCP)(nil)
