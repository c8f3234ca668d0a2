package transport

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Write coalescing. yamux's send loop writes every frame with its own
// calls (a data frame's header, then its body), each a syscall, and each
// segment wakes the receiving process. When a node sends several small
// messages to one peer within microseconds (a trainer's bias and weight
// gradients, a pserver's parts finishing one step), that is one wake-up
// per message on both ends. coalescingConn instead appends small writes
// to a buffer and lets a flusher goroutine write whatever accumulated in
// one call: the flusher runs once the goroutines producing frames have
// nothing more to do right now, so no timer and no added latency. A large
// write waits for the buffer to drain (order is kept) and goes out
// directly from yamux's memory, together with what is pending. Reads are
// coalesced the same way (see Read).
const (
	directWrite = 32 << 10  // writes from this size bypass the buffer
	readAhead   = 64 << 10  // bytes read at once for yamux's small reads
	maxPending  = 256 << 10 // a writer waits while this much is pending
	closeDrain  = time.Second
)

// coalescingConn is the connection under a yamux session. It coalesces
// yamux's small writes into one write per burst (Write, flusher) and its
// small reads into one read of up to readAhead bytes (Read); it counts
// every byte written and read (TCP.bytesSent, bytesRecv: Stats and the
// wire bytes of Traffic); and before each read from the network it sets a
// read deadline of three KeepAlive intervals (yamux pings every KeepAlive,
// so a connection silent that long is dead). Close writes what is pending
// first.
type coalescingConn struct {
	net.Conn
	t    *TCP
	idle time.Duration

	dl   time.Time // the read deadline set (extend)
	rmem []byte    // read-ahead memory
	rbuf []byte    // read but not yet handed to yamux: rbuf[rpos:]
	rpos int

	mu      sync.Mutex
	drained sync.Cond // signalled when a write finished
	buf     []byte    // pending bytes, in order
	spare   []byte
	writing bool // a write to the connection is in progress
	err     error
	kick    chan struct{}
	done    chan struct{}
	stop    sync.Once
	// rdone is closed when a read from the network failed (the peer's
	// end, or the connection's): yamux's receive loop reads no more.
	rdone chan struct{}
	rstop sync.Once
	bufs  net.Buffers
	arr   [2][]byte
	one   []byte // a frame WriteFrame writes at once
	// urgent counts the senders in a hurry writing now (WriteFrame)
	urgent atomic.Int32
}

func newCoalescingConn(raw net.Conn, t *TCP) *coalescingConn {
	c := &coalescingConn{Conn: raw, t: t, idle: 3 * t.cfg.KeepAlive, kick: make(chan struct{}, 1), done: make(chan struct{}), rdone: make(chan struct{})}
	c.drained.L = &c.mu
	go c.flusher()
	return c
}

// Read is called by yamux's receive loop only. yamux reads through a
// 4 KiB bufio.Reader, so a burst of a few small frames took a read per
// 4 KiB; coalescingConn reads up to readAhead bytes at once and serves the
// small reads from them. Reads of at least half of it go straight into
// the caller's memory (a tensor's body), after what is buffered.
func (c *coalescingConn) Read(b []byte) (int, error) {
	if c.rpos < len(c.rbuf) {
		n := copy(b, c.rbuf[c.rpos:])
		c.rpos += n
		return n, nil
	}
	c.extend()
	if len(b) >= readAhead/2 {
		n, err := c.Conn.Read(b)
		c.t.bytesRecv.Add(int64(n))
		c.readFailed(err)
		return n, err
	}
	if c.rmem == nil {
		c.rmem = make([]byte, readAhead)
	}
	n, err := c.Conn.Read(c.rmem)
	c.t.bytesRecv.Add(int64(n))
	c.rbuf, c.rpos = c.rmem[:n], 0
	k := copy(b, c.rbuf)
	c.rpos = k
	if k < n {
		err = nil // the rest is served first; a read error comes again
	}
	c.readFailed(err)
	return k, err
}

// Write is called by yamux's send loop only, one call at a time.
func (c *coalescingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if len(b) >= directWrite {
		for c.writing && c.err == nil {
			c.drained.Wait()
		}
		if c.err != nil {
			c.mu.Unlock()
			return 0, c.err
		}
		out := c.take()
		c.mu.Unlock()
		c.t.bytesSent.Add(int64(len(out) + len(b))) // see flusher
		var n int64                                 // bytes of b written (< 0: out was cut short)
		var err error
		if len(out) > 0 { // a pending header and its body in one writev
			c.arr[0], c.arr[1] = out, b
			c.bufs = c.arr[:]
			n, err = c.bufs.WriteTo(c.Conn)
			c.arr[0], c.arr[1] = nil, nil
			n -= int64(len(out))
		} else {
			var k int
			k, err = c.Conn.Write(b)
			n = int64(k)
		}
		c.wrote(out, len(b)-int(n), err)
		if n < 0 {
			n = 0
		}
		return int(n), err
	}
	for len(c.buf)+len(b) > maxPending && c.err == nil {
		c.drained.Wait()
	}
	if c.err != nil {
		c.mu.Unlock()
		return 0, c.err
	}
	c.buf = append(c.buf, b...)
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return len(b), nil
}

// extend moves the read deadline on to idle from now before a read from
// the network. Setting a deadline costs a timer update in the runtime, so
// it is moved only once it is more than an eighth of idle behind: a
// connection silent for between 7/8 of idle and idle is dead.
func (c *coalescingConn) extend() {
	now := time.Now()
	if c.dl.Sub(now) < c.idle-c.idle/8 {
		c.dl = now.Add(c.idle)
		c.Conn.SetReadDeadline(c.dl)
	}
}

// WriteFrame is called by yamux for a frame a sender writes itself (its
// header and body), one call at a time, as Write is. A small frame of a
// sender that is in a hurry (urgent: a Send that writes its message
// itself, msgWriter.direct) is written at once from its goroutine when
// nothing is pending and no write in progress, header and body in one
// system call, without the hand-off to the flusher; otherwise it goes
// the way of two Writes, which the flusher joins with what else is
// written meanwhile.
func (c *coalescingConn) WriteFrame(hdr, body []byte) error {
	n := len(hdr) + len(body)
	c.mu.Lock()
	if n < directWrite && c.urgent.Load() > 0 && !c.writing && len(c.buf) == 0 && c.err == nil {
		c.writing = true
		c.mu.Unlock()
		c.one = append(append(c.one[:0], hdr...), body...)
		c.t.bytesSent.Add(int64(n)) // see flusher
		k, err := c.Conn.Write(c.one)
		c.wrote(nil, n-k, err)
		return err
	}
	c.mu.Unlock()
	if _, err := c.Write(hdr); err != nil {
		return err
	}
	if len(body) > 0 {
		if _, err := c.Write(body); err != nil {
			return err
		}
	}
	return nil
}

// readFailed records that reading from the network ended (err != nil,
// handed to yamux's receive loop, which then stops reading).
func (c *coalescingConn) readFailed(err error) {
	if err != nil {
		c.rstop.Do(func() { close(c.rdone) })
	}
}

// take hands the pending bytes to the caller, who writes them; called
// with c.mu held and no write in progress.
func (c *coalescingConn) take() []byte {
	out := c.buf
	c.buf, c.spare = c.spare[:0], nil
	c.writing = true
	return out
}

// wrote ends a write of out; unwritten bytes of it (and of a direct
// write's body) did not go out after all.
func (c *coalescingConn) wrote(out []byte, unwritten int, err error) {
	if unwritten > 0 {
		c.t.bytesSent.Add(-int64(unwritten))
	}
	c.mu.Lock()
	c.writing = false
	if out != nil {
		c.spare = out[:0]
	}
	failed := err != nil && c.err == nil
	if failed {
		c.err = err
	}
	pending := len(c.buf) > 0
	c.drained.Broadcast()
	c.mu.Unlock()
	if failed {
		c.Conn.Close() // the session notices through its reads (outside the lock: TLS writes a close_notify)
	}
	if pending {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// flusher writes what accumulated whenever it is kicked.
func (c *coalescingConn) flusher() {
	for {
		select {
		case <-c.kick:
		case <-c.done:
			return
		}
		c.mu.Lock()
		if c.writing || len(c.buf) == 0 || c.err != nil {
			c.mu.Unlock()
			continue // the write in progress kicks again when it ends
		}
		out := c.take()
		c.mu.Unlock()
		// Counted before the write: the peer may act on these bytes (a
		// reply, a Done) before this goroutine runs again, and a node
		// reads its Traffic once its peers finished.
		c.t.bytesSent.Add(int64(len(out)))
		n, err := c.Conn.Write(out)
		c.wrote(out, len(out)-n, err)
	}
}

// Close writes what is pending (within closeDrain), then closes the
// connection: a Done or an abort frame queued just before is not lost.
//
// It closes gracefully (lingers): it shuts its sending side (the peer
// reads everything written, then its end), and waits, within closeDrain,
// until the peer closed its side too and every byte it sent was read.
// Closing a socket whose received bytes were not all read makes the
// kernel reset the connection and drop what this side wrote but had not
// transmitted yet: under load, a node stopping the job lost its abort
// frame and last messages that way, and its peers waited for it to come
// back instead of stopping (TestBadBatchStopsTheJob failed 3 runs in
// 101 on a loaded machine; TestCoalescingConnCloseDeliversWithUnreadInput).
func (c *coalescingConn) Close() error {
	c.mu.Lock()
	deadline := time.Now().Add(closeDrain)
	if c.err == nil && (len(c.buf) > 0 || c.writing) {
		c.Conn.SetWriteDeadline(deadline)
		select {
		case c.kick <- struct{}{}:
		default:
		}
		for (len(c.buf) > 0 || c.writing) && c.err == nil {
			c.drained.Wait()
		}
	}
	graceful := c.err == nil
	if c.err == nil {
		c.err = net.ErrClosed
	}
	c.mu.Unlock()
	c.stop.Do(func() { close(c.done) })
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); graceful && ok && hc.CloseWrite() == nil {
		c.linger(deadline)
	}
	return c.Conn.Close()
}

// linger waits until deadline for the peer's end: while yamux's receive
// loop reads, until its read fails; then it reads and drops what is left
// itself (the loop may have stopped on an error of its own).
func (c *coalescingConn) linger(deadline time.Time) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-c.rdone:
	case <-t.C:
		return
	}
	c.Conn.SetReadDeadline(deadline)
	buf := make([]byte, 4096)
	for {
		if _, err := c.Conn.Read(buf); err != nil {
			return
		}
	}
}
