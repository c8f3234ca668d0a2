package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
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
	// Listen is the address a pserver listens on ("127.0.0.1:0" picks a port).
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
	// TLS, when set, wraps every connection in TLS before the handshake
	// (which still authenticates with the token): a server config with a
	// certificate for Listen (set ClientCAs and ClientAuth to require
	// client certificates), a client config with RootCAs for Dial.
	TLS *tls.Config
	// Accept declares the transfers this node receives before any peer can
	// send (the same as calling Accept, without the race against a peer
	// that sends as soon as it is connected).
	Accept []Spec
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
	bytesSent, bytesRecv     atomic.Int64 // every byte of the connections (countConn)
	payloadSent, payloadRecv atomic.Int64 // data message bodies (writer.write, decoder)
	msgsSent, msgsRecv       atomic.Int64
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

	mu        sync.Mutex
	sess      *yamux.Session
	cur       *conn
	last      *conn         // the newest connection, live or not
	attaching bool          // a connection is being set up
	inc       uint64        // the peer's incarnation (0: never connected)
	epoch     int64         // bumped when the peer restarts; older queued items are dropped
	change    chan struct{} // closed (and replaced) when sess changes
	gone      chan struct{} // closed when a dialer gives the peer up for good
	err       error
	writers   map[string]*writer
}

// A peer's connection state (peer.state).
const (
	connNever int32 = iota // not connected yet: sends to it wait in the queue
	connUp
	connDown // a session was lost and none replaced it yet
)

func newTCP(cfg Config) (*TCP, error) {
	cfg.defaults()
	if cfg.Self == "" {
		return nil, errors.New("transport: Config.Self is empty")
	}
	t := &TCP{cfg: cfg, job: jobHash(cfg.JobHash), peers: map[NodeID]*peer{},
		closing: make(chan struct{}), hs: map[net.Conn]struct{}{}, lostCh: make(chan struct{}), inc: newIncarnation()}
	var ids []NodeID
	for id, addr := range cfg.Peers {
		if len(id) == 0 || len(id) > maxName {
			return nil, fmt.Errorf("transport: bad node id %q", id)
		}
		ids = append(ids, id)
		t.peers[id] = &peer{t: t, id: id, addr: addr, slots: make(chan struct{}, cfg.QueueDepth),
			change: make(chan struct{}), gone: make(chan struct{}), writers: map[string]*writer{}}
	}
	t.in = newInbox(cfg.Self, ids, cfg.OnError)
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
	if len(t.cfg.Token) == 0 && !t.cfg.Insecure && !loopback(t.cfg.Listen) {
		return nil, fmt.Errorf("transport: refusing to listen on %s without a token (set the job token, or Insecure)", t.cfg.Listen)
	}
	var lc net.ListenConfig
	t.ln, err = lc.Listen(ctx, "tcp", t.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	t.wg.Add(1)
	go t.acceptLoop()
	return t, nil
}

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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

func (t *TCP) dialPeer(ctx context.Context, p *peer) error {
	backoff := 20 * time.Millisecond
	var last error
	if t.holdDial != nil {
		select {
		case <-t.holdDial:
		case <-ctx.Done():
		}
	}
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", p.addr)
		if err == nil && t.cfg.TLS != nil {
			if c, err = clientTLS(ctx, c, t.cfg.TLS, p.addr, t.cfg.HandshakeTimeout); err != nil {
				return &PeerError{p.id, fmt.Errorf("at %s: %w", p.addr, err)}
			}
		}
		if err == nil {
			c.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
			var inc uint64
			inc, err = clientHandshake(c, t.cfg.Self, p.id, t.inc, t.cfg.Token, t.job)
			if err == nil {
				c.SetDeadline(time.Time{})
				if err = t.attach(p, c, false, inc); err == nil {
					return nil
				}
			}
			c.Close()
			// "already connected": the listener has not yet noticed that
			// our previous connection died; it will.
			if !errors.Is(err, errDuplicate) && (errors.Is(err, ErrAuth) || errors.Is(err, ErrJobMismatch) || errors.Is(err, ErrRefused)) {
				return &PeerError{p.id, fmt.Errorf("at %s: %w", p.addr, err)}
			}
		}
		last = err
		t.cfg.Log.Debug().Str("peer", string(p.id)).Err(err).Msg("connect failed, retrying")
		select {
		case <-ctx.Done():
			return &PeerError{p.id, fmt.Errorf("unreachable at %s after %s: %v", p.addr, t.cfg.ConnectTimeout, last)}
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (t *TCP) acceptLoop() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			select {
			case <-t.closing:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		t.mu.Lock()
		if len(t.hs) >= 64 { // handshakes in flight: shed load
			t.mu.Unlock()
			c.Close()
			continue
		}
		t.hs[c] = struct{}{}
		t.wg.Add(1)
		t.mu.Unlock()
		go t.serveConn(c)
	}
}

func (t *TCP) serveConn(raw net.Conn) {
	defer t.wg.Done()
	raw.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout))
	c := raw
	if t.cfg.TLS != nil {
		tc := tls.Server(raw, t.cfg.TLS)
		if err := tc.Handshake(); err != nil {
			t.mu.Lock()
			delete(t.hs, raw)
			t.mu.Unlock()
			t.cfg.Log.Warn().Str("remote", raw.RemoteAddr().String()).Err(err).Msg("TLS handshake failed")
			t.in.onError(fmt.Errorf("transport: %s: TLS: %w", raw.RemoteAddr(), err))
			raw.Close()
			return
		}
		c = tc
	}
	id, inc, err := serverHandshake(c, t.cfg.Self, t.inc, t.cfg.Token, t.job, func(id NodeID) byte {
		p := t.peers[id]
		if p == nil {
			return stUnknownPeer
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.sess != nil || p.attaching { // live: a lost peer may connect again, a live one not twice
			return stDuplicate
		}
		return stOK
	})
	t.mu.Lock()
	delete(t.hs, raw)
	t.mu.Unlock()
	if err != nil {
		t.cfg.Log.Warn().Str("remote", c.RemoteAddr().String()).Err(err).Msg("connection refused")
		t.in.onError(fmt.Errorf("transport: %s: %w", c.RemoteAddr(), err))
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	if err := t.attach(t.peers[id], c, true, inc); err != nil {
		t.cfg.Log.Warn().Str("peer", string(id)).Err(err).Msg("connection setup failed")
	}
}

type conn struct {
	t       *TCP
	p       *peer
	raw     net.Conn
	server  bool
	inc     uint64 // the peer's incarnation on this connection
	sess    *yamux.Session
	ctl     *yamux.Stream // this side's control stream (resume, done, abort frames)
	mu      sync.Mutex
	readers []*atomic.Int64
	running sync.WaitGroup // its stream readers (and the loop accepting them)

	// The peer's resume frame: what it received of each transfer before
	// this connection. Writers wait for it before writing.
	resumed   chan struct{}
	gotResume bool
	points    map[string]resumePoint
}

// attach makes raw (authenticated, the peer at incarnation inc) p's
// connection: once the previous connection's readers stopped, it tells the
// peer what arrived from it so far (the resume frame), then publishes the
// session to the writers.
func (t *TCP) attach(p *peer, raw net.Conn, server bool, inc uint64) error {
	if tc, ok := raw.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	yc := yamux.DefaultConfig()
	yc.MaxStreamWindowSize = t.cfg.StreamWindow
	yc.KeepAliveInterval = t.cfg.KeepAlive
	yc.ConnectionWriteTimeout = t.cfg.ReadTimeout
	yc.StreamOpenTimeout = t.cfg.ReadTimeout
	yc.StreamCloseTimeout = t.cfg.CloseTimeout
	yc.AcceptBacklog = maxStreams
	yc.LogOutput = io.Discard
	cc := newCountConn(raw, t)
	var sess *yamux.Session
	if server {
		sess, _ = yamux.Server(cc, yc)
	} else {
		sess, _ = yamux.Client(cc, yc)
	}
	p.mu.Lock()
	select {
	case <-t.closing:
		p.mu.Unlock()
		sess.Close()
		return ErrClosed
	default:
	}
	if p.sess != nil || p.attaching { // lost a race with another connection of the same peer
		p.mu.Unlock()
		sess.Close()
		return errDuplicate
	}
	p.attaching = true
	prev := p.last
	restarted := p.inc != 0 && p.inc != inc
	again := p.inc != 0
	if restarted {
		// A new process: what was queued for the old one is dropped, and
		// what is queued from now on (the inbox tells the restart at once)
		// is for the new one.
		p.epoch++
		p.sent.Store(0)
	}
	p.inc = inc
	p.mu.Unlock()
	if prev != nil {
		prev.running.Wait() // its decoders' counts are final
	}
	t.in.connected(p.id, inc)
	c := &conn{t: t, p: p, raw: raw, server: server, inc: inc, sess: sess, resumed: make(chan struct{})}
	err := c.sendResume()
	p.mu.Lock()
	p.attaching = false
	if err != nil {
		p.mu.Unlock()
		sess.Close()
		t.in.fail(p.id, err)
		return err
	}
	p.sess, p.cur, p.last, p.err = sess, c, c, nil
	p.state.Store(connUp)
	close(p.change)
	p.change = make(chan struct{})
	t.conns.Add(1)
	p.mu.Unlock()
	ev := t.cfg.Log.Info()
	if restarted {
		ev = t.cfg.Log.Warn()
		t.in.onError(&PeerError{p.id, ErrPeerRestarted})
	}
	ev.Str("peer", string(p.id)).Str("remote", raw.RemoteAddr().String()).Bool("reconnected", again).Bool("restarted", restarted).Msg("connected")
	t.wg.Add(2)
	c.running.Add(1)
	go c.acceptStreams()
	go c.monitor()
	return nil
}

// sendResume opens this side's control stream and writes the resume frame.
func (c *conn) sendResume() error {
	st, err := c.sess.OpenStream()
	if err != nil {
		return err
	}
	b := make([]byte, 1+frameHeader, 1+frameHeader+64)
	b = appendResume(b, c.t.in.resumePoints(c.p.id))
	putHeader(b[1:], header{kind: kindResume, len: len(b) - 1 - frameHeader})
	if _, err := st.Write(b); err != nil {
		return err
	}
	c.ctl = st
	return nil
}

// onResume records the peer's resume frame.
func (c *conn) onResume(rps []resumePoint) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gotResume {
		return fmt.Errorf("%w: a second resume frame", errProtocol)
	}
	c.gotResume = true
	c.points = map[string]resumePoint{}
	for _, rp := range rps {
		c.points[rp.v] = rp
	}
	close(c.resumed)
	return nil
}

// awaitResume returns what the peer has of transfer v, once its resume
// frame arrived.
func (c *conn) awaitResume(v string) (resumePoint, error) {
	select {
	case <-c.resumed:
	case <-c.sess.CloseChan():
		return resumePoint{}, errors.New("connection lost")
	case <-c.t.closing:
		return resumePoint{}, ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.points[v], nil
}

func (c *conn) acceptStreams() {
	defer c.t.wg.Done()
	defer c.running.Done()
	n := 0
	for {
		st, err := c.sess.AcceptStream()
		if err != nil {
			return
		}
		if n++; n > maxStreams {
			c.fail(fmt.Errorf("%w: more than %d streams", errProtocol, maxStreams))
			return
		}
		dl := &atomic.Int64{}
		dl.Store(time.Now().Add(c.t.cfg.ReadTimeout).UnixNano())
		c.mu.Lock()
		c.readers = append(c.readers, dl)
		c.mu.Unlock()
		c.t.wg.Add(1)
		c.running.Add(1)
		go c.readStream(st, dl)
	}
}

func (c *conn) readStream(st *yamux.Stream, dl *atomic.Int64) {
	defer c.t.wg.Done()
	defer c.running.Done()
	defer st.Close()
	name, err := readPreamble(st)
	if err == nil {
		d := &decoder{in: c.t.in, src: c.p.id, inc: c.inc, name: name, maxFrame: c.t.cfg.MaxFrame,
			deadline: dl, timeout: c.t.cfg.ReadTimeout, msgs: &c.t.msgsRecv, payload: &c.t.payloadRecv, dead: c.sess.CloseChan(), resumed: c.onResume}
		err = d.run(st)
	}
	dl.Store(0)
	if errors.Is(err, errProtocol) {
		c.fail(err)
	}
}

// fail reports a broken peer and closes its connection (only that one).
func (c *conn) fail(err error) {
	select {
	case <-c.t.closing:
		return
	default:
	}
	c.t.cfg.Log.Warn().Str("peer", string(c.p.id)).Err(err).Msg("closing connection")
	c.t.in.onError(&PeerError{c.p.id, err})
	c.sess.Close()
}

// monitor waits for the session's end (or the endpoint's Close) and is
// the watchdog for slow senders.
func (c *conn) monitor() {
	defer c.t.wg.Done()
	tick := time.NewTicker(max(c.t.cfg.ReadTimeout/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-c.sess.CloseChan():
			c.lost(errors.New("connection lost"))
			return
		case <-c.t.closing:
			c.sess.Close()
			c.lost(ErrClosed)
			return
		case now := <-tick.C:
			c.mu.Lock()
			slow := false
			for _, dl := range c.readers {
				if d := dl.Load(); d != 0 && now.UnixNano() > d {
					slow = true
				}
			}
			c.mu.Unlock()
			if slow {
				c.fail(fmt.Errorf("%w: slow sender, no progress within %s", errProtocol, c.t.cfg.ReadTimeout))
			}
		}
	}
}

func (c *conn) lost(err error) {
	t, p := c.t, c.p
	// First what arrived before the end: a peer that finishes writes its
	// Done and closes, and the Done may still sit in a stream's buffer
	// when the session ends; read, it makes the end a quiet one instead
	// of a loss to wait for. The readers stop once the session is closed.
	c.running.Wait()
	t.conns.Add(-1)
	p.mu.Lock()
	if p.sess != c.sess {
		p.mu.Unlock()
		return
	}
	p.sess, p.cur, p.err = nil, nil, err
	p.state.Store(connDown)
	close(p.change)
	p.change = make(chan struct{})
	t.in.fail(p.id, err)
	p.mu.Unlock()
	t.mu.Lock()
	close(t.lostCh)
	t.lostCh = make(chan struct{})
	t.mu.Unlock()
	select {
	case <-t.closing:
		return
	default:
	}
	gone := false
	select {
	case <-p.gone:
		gone = true
	default:
	}
	switch {
	case gone:
	case t.in.aborted(p.id):
		t.cfg.Log.Debug().Str("peer", string(p.id)).Msg("connection closed after the peer stopped the job")
	case t.in.finishedPeer(p.id) && p.pending.Load() == 0:
		// The peer said Done and all it sent arrived: its end, not a fault.
		t.cfg.Log.Debug().Str("peer", string(p.id)).Msg("connection closed after the peer finished")
	case !c.server:
		t.cfg.Log.Warn().Str("peer", string(p.id)).Err(err).Msg("connection lost; reconnecting")
		t.wg.Add(1)
		go t.redial(p)
	default:
		t.cfg.Log.Warn().Str("peer", string(p.id)).Err(err).Msg("connection lost; it may reconnect")
	}
}

// redial reconnects a dialer to p after a loss, within ConnectTimeout;
// after that p is gone for good: queued and later sends to it fail.
func (t *TCP) redial(p *peer) {
	defer t.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.ConnectTimeout)
	defer cancel()
	go func() {
		select {
		case <-t.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := t.dialPeer(ctx, p)
	if err == nil {
		return
	}
	select {
	case <-t.closing:
		return
	default:
	}
	t.cfg.Log.Warn().Str("peer", string(p.id)).Err(err).Msg("giving up reconnecting")
	t.giveUp(p, err, false)
}

// giveUp declares p gone for good: queued and later sends to it fail, and
// so do recvs from it. A redial gives up only while no connection came
// back; a peer that lacks what cannot be written again (force) is closed.
func (t *TCP) giveUp(p *peer, err error, force bool) {
	p.mu.Lock()
	if p.sess != nil && !force {
		p.mu.Unlock()
		return
	}
	p.err = err
	sess := p.sess
	select {
	case <-p.gone:
	default:
		close(p.gone)
	}
	p.mu.Unlock()
	if sess != nil {
		sess.Close()
	}
	t.in.fail(p.id, err)
	t.mu.Lock()
	close(t.lostCh)
	t.lostCh = make(chan struct{})
	t.mu.Unlock()
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
		MsgsSent: t.msgsSent.Load(), MsgsRecv: t.msgsRecv.Load()}
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
	return t.in.waitDone(ctx, peer)
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
	p.mu.Lock()
	w := p.writers[v]
	if w == nil {
		select {
		case <-t.closing:
			p.mu.Unlock()
			<-p.slots
			return ErrClosed
		default:
		}
		w = &writer{p: p, name: v, q: make(chan item, t.cfg.QueueDepth), epoch: p.epoch}
		p.writers[v] = w
		t.wg.Add(1)
		go w.run()
	}
	if w.dead {
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
	w.q <- it
	p.mu.Unlock()
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
		for _, c := range t.waiters {
			c <- struct{}{}
		}
		t.waiters = t.waiters[:0]
	}
	t.mu.Unlock()
}

// Flush waits until every message queued so far was written. It fails
// with the peer's error when a peer that messages are queued for is not
// connected (they stay queued: once it is back, Flush again), or was given
// up with messages queued for it.
func (t *TCP) Flush(ctx context.Context) error { return t.flush(ctx, false) }

// flush waits until what was queued is written. With live, peers that are
// not connected are skipped instead of failing it (Close: what can still
// be said, such as an abort's reason, reaches the peers that are there).
func (t *TCP) flush(ctx context.Context, live bool) error {
	for {
		t.mu.Lock()
		waiting := false
		for _, p := range t.peers {
			st := p.state.Load()
			gone := p.lost.Load() > 0 || (st == connDown && p.pending.Load() > 0)
			if gone && !live {
				t.mu.Unlock()
				return t.peerErr(p)
			}
			gone = gone || st != connUp // live: a peer not connected now is not waited for
			waiting = waiting || (!gone && p.pending.Load() > 0)
		}
		if t.pending == 0 || (live && !waiting) {
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
