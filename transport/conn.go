package transport

// Connection lifecycle: a dialer's connect-and-retry loop (dialPeer) and a
// listener's accept loop and handshake (serveConn); attach, which makes an
// authenticated connection a peer's yamux session after the resume
// exchange (each side's first control frame says what it received); the
// stream readers, the slow-sender watchdog (monitor); and what follows a
// loss: lost, redial, giveUp.

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
)

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
		network, address := splitAddr(p.addr)
		c, err := d.DialContext(ctx, network, address)
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
		if !errors.Is(err, errDuplicate) { // "already connected": the listener is there
			p.mu.Lock()
			close(p.dialFail)
			p.dialFail = make(chan struct{})
			p.mu.Unlock()
		}
		t.cfg.Log.Debug().Str("peer", p.id.String()).Err(err).Msg("connect failed, retrying")
		select {
		case <-ctx.Done():
			if errors.Is(last, ErrRefused) { // refused as already connected to the end: still a refusal (errors.Is)
				return &PeerError{p.id, fmt.Errorf("unreachable at %s after %s: %w", p.addr, t.cfg.ConnectTimeout, last)}
			}
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
		if id.Role == ReplicaRole {
			return t.admitReplica()
		}
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
	if id.Role == ReplicaRole {
		go t.cfg.Replicas(id, inc, c) // its own: the endpoint does not wait for it
		return
	}
	if err := t.attach(t.peers[id], c, true, inc); err != nil {
		t.cfg.Log.Warn().Str("peer", id.String()).Err(err).Msg("connection setup failed")
	}
}

type conn struct {
	t       *TCP
	p       *peer
	raw     net.Conn
	cc      *coalescingConn // under sess
	server  bool
	inc     uint64 // the peer's incarnation on this connection
	sess    *yamux.Session
	ctl     *yamux.Stream // this side's message stream (msgWriter)
	mu      sync.Mutex
	readers []*atomic.Int64
	running sync.WaitGroup // its stream readers (and the loop accepting them)

	// The peer's resume frame: what it received of each transfer before
	// this connection. Writers wait for it before writing.
	resumed   chan struct{}
	gotResume bool
	points    map[string]resumePoint
	opened    map[string]bool // the streams the peer opened: "" its message stream, else a bulk stream's transfer
}

// attach makes raw (authenticated, the peer at incarnation inc) p's
// connection: once the previous connection's readers stopped, it tells the
// peer what arrived from it so far (the resume frame), then publishes the
// session to the writers.
func (t *TCP) attach(p *peer, raw net.Conn, server bool, inc uint64) error {
	if tc, ok := raw.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if uc, ok := raw.(*net.UnixConn); ok {
		// Loopback TCP sizes its buffers to the traffic; a Unix socket
		// keeps its ~200 KiB default, and a 1 MB parameter block then
		// costs the writer and the reader several sleeps and wake-ups.
		// With 4 MiB (capped by net.core.wmem_max/rmem_max) DLRM's 2x2
		// job on one machine ran 127-145 steps/s against 111 with the
		// default and 107-123 over TCP (bench/history-2026-12.md).
		uc.SetWriteBuffer(4 << 20)
		uc.SetReadBuffer(4 << 20)
	}
	yc := yamux.DefaultConfig()
	yc.MaxStreamWindowSize = t.cfg.StreamWindow
	yc.KeepAliveInterval = t.cfg.KeepAlive
	yc.ConnectionWriteTimeout = t.cfg.ReadTimeout
	yc.StreamOpenTimeout = t.cfg.ReadTimeout
	yc.StreamCloseTimeout = t.cfg.CloseTimeout
	yc.AcceptBacklog = maxStreams
	yc.LogOutput = io.Discard
	cc := newCoalescingConn(raw, t)
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
	c := &conn{t: t, p: p, raw: raw, cc: cc, server: server, inc: inc, sess: sess, resumed: make(chan struct{}), opened: map[string]bool{}}
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
	ev.Str("peer", p.id.String()).Str("remote", raw.RemoteAddr().String()).Bool("reconnected", again).Bool("restarted", restarted).Msg("connected")
	t.wg.Add(2)
	c.running.Add(1)
	go c.acceptStreams()
	go c.monitor()
	return nil
}

// sendResume opens this side's message stream (preamble: name length 0)
// and writes the resume frame, its first frame.
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

// readStream reads one stream the peer opened: its message stream
// (preamble name length 0) or the bulk stream of one of its transfers.
// Each at most once per connection.
func (c *conn) readStream(st *yamux.Stream, dl *atomic.Int64) {
	defer c.t.wg.Done()
	defer c.running.Done()
	defer st.Close()
	name, err := readPreamble(st)
	if err == nil {
		c.mu.Lock()
		if c.opened[name] {
			err = fmt.Errorf("%w: a second stream of %q", errProtocol, name)
		}
		c.opened[name] = true
		c.mu.Unlock()
	}
	if err == nil {
		fr := frameReader{in: c.t.in, src: c.p.id, inc: c.inc, maxFrame: c.t.cfg.MaxFrame, deadline: dl,
			timeout: c.t.cfg.ReadTimeout, msgs: &c.t.msgsRecv, payload: &c.t.payloadRecv, dead: c.sess.CloseChan()}
		if name == "" {
			err = (&msgReader{frameReader: fr, resumed: c.onResume, reads: &c.t.batchesRecv}).attach(st)
		} else {
			err = (&decoder{frameReader: fr, name: name}).run(st)
		}
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
	c.t.cfg.Log.Warn().Str("peer", c.p.id.String()).Err(err).Msg("closing connection")
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
		t.cfg.Log.Debug().Str("peer", p.id.String()).Msg("connection closed after the peer stopped the job")
	case t.in.finishedPeer(p.id) && p.pending.Load() == 0 && (c.server || !p.said.Load()):
		// The peer said Done and all it sent arrived: its end, not a fault.
		t.cfg.Log.Debug().Str("peer", p.id.String()).Msg("connection closed after the peer finished")
	case t.in.finishedPeer(p.id) && (p.pending.Load() == 0 || p.bye.Load()):
		// Both said Done: this node's goodbye (sayBye), written or still
		// to come, may not have reached a listener that waits for it
		// (Config.HangupWait), so it redials, quietly; a listener that
		// had it and closed is not there to answer. Once both said Done
		// the goodbye is all this node can still have queued for it
		// (TestTCPAbortAndQuietEnd closes the listener right after
		// WaitDone queued it: a warning there was a false alarm).
		t.cfg.Log.Debug().Str("peer", p.id.String()).Msg("connection closed after the peer finished; redialing to say goodbye")
		t.wg.Add(1)
		go t.redial(p)
	case !c.server:
		t.cfg.Log.Warn().Str("peer", p.id.String()).Err(err).Msg("connection lost; reconnecting")
		t.wg.Add(1)
		go t.redial(p)
	default:
		t.cfg.Log.Warn().Str("peer", p.id.String()).Err(err).Msg("connection lost; it may reconnect")
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
	if t.in.finishedPeer(p.id) { // only a goodbye was at stake
		t.cfg.Log.Debug().Str("peer", p.id.String()).Err(err).Msg("giving up reconnecting to a peer that finished")
	} else {
		t.cfg.Log.Warn().Str("peer", p.id.String()).Err(err).Msg("giving up reconnecting")
	}
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
