package transport

// The writer of a peer's message stream (docs/wire.md, section 3): Send
// appends a small message (and Done, Abort) to the peer's queue and wakes
// this one goroutine, which takes everything queued at once and writes it
// as one batch: the frames back to back in one stream write, one yamux
// frame, so the messages a node sends a peer together (a trainer's
// gradients, a pserver's parameters of one step) cost the peer one read
// and one wake-up. A transfer is named by a 2-byte id bound on first use
// on each connection (a bind frame). No timer: what queues while a batch
// is being written goes out in the next. The first Send after the node
// waited for a message writes its message itself when nothing is queued
// (add, direct): a reply leaves without the hand-off to the goroutine.

import (
	"fmt"
	"sync"
)

const batchMax = 256 << 10 // a batch is written once it holds this many bytes

// msgWriter writes one peer's message stream.
type msgWriter struct {
	p    *peer
	q    []item        // under p.mu: queued, not yet taken
	kick chan struct{} // something was queued
	dead bool          // under p.mu
	// parks is the inbox's count of waiting recvs at the last direct
	// write (under p.mu)
	parks int64

	// mu is held by whoever writes the stream: the goroutine (run), or a
	// Send that found nothing queued and writes its message itself
	// (direct), without the hand-off to the goroutine. It guards the rest.
	mu     sync.Mutex
	log    sendLog
	c      *conn // the connection ids are bound on
	failed *conn // the connection a write failed on
	// closeFailed: a direct write failed, the goroutine closes failed
	closeFailed bool
	ids         map[string]uint16 // transfer -> id on c
	seen        map[string]bool   // transfers ever sent inline (the log keeps Keep messages of each)
	cur         []item
	one         [1]item
	idxs        []int64
	buf         []byte
	batch       []int64 // the log's numbers of the messages in buf
}

func newMsgWriter(p *peer) *msgWriter {
	t := p.t
	return &msgWriter{p: p, kick: make(chan struct{}, 1), ids: map[string]uint16{}, seen: map[string]bool{},
		log: sendLog{p: p, epoch: p.epoch, limit: max(t.cfg.Keep, t.cfg.QueueDepth)}}
}

// add queues it, or has the caller write it (true: it holds w.mu and
// calls direct once it released p.mu) when nothing is queued, nobody
// writes and a recv of this node waited for a message since the last
// Send that wrote itself: the first message after a wait (a reply, the
// next step's first message) goes out at once, without the hand-off to
// the goroutine, and the rest of a burst queues behind it, for the
// goroutine to write as one batch. The caller holds p.mu.
func (w *msgWriter) add(it item) bool {
	in := w.p.t.in
	if parks := in.parks.Load(); len(w.q) == 0 && parks != w.parks && w.mu.TryLock() {
		w.parks = parks
		return true
	}
	w.q = append(w.q, it)
	w.wake()
	return false
}

func (w *msgWriter) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// direct writes it from the sending goroutine, w.mu held (add), then
// releases w.mu. Whatever the goroutine has to do first (a new
// connection's catch-up, a failed write, a restarted peer) it leaves to
// the goroutine: it queues it first in line.
func (w *msgWriter) direct(it item) {
	p := w.p
	defer w.mu.Unlock()
	p.mu.Lock()
	c, epoch := p.cur, p.epoch
	if c == nil || c != w.c || c == w.failed || epoch != w.log.epoch || w.dead {
		w.q = append(w.q, item{})
		copy(w.q[1:], w.q)
		w.q[0] = it
		w.wake()
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	w.one[0] = it
	c.cc.urgent.Add(1)
	err := w.send(c, epoch, w.one[:])
	c.cc.urgent.Add(-1)
	if err != nil {
		w.failed, w.closeFailed = c, true // the goroutine closes it (which may take a while)
		w.wake()
	}
}

func (w *msgWriter) run() {
	p, t := w.p, w.p.t
	defer t.wg.Done()
	for {
		w.mu.Lock()
		failed, closeFailed := w.failed, w.closeFailed
		w.closeFailed = false
		w.mu.Unlock()
		if closeFailed {
			failed.sess.Close() // the monitor records the loss
		}
		c, epoch, change, ok := p.session(failed)
		w.mu.Lock()
		if !ok {
			w.drain()
			w.mu.Unlock()
			return
		}
		if epoch != w.log.epoch {
			w.log.restart(epoch)
		}
		if c == w.failed {
			w.mu.Unlock() // a direct write failed on it meanwhile
			continue
		}
		if c != w.c {
			w.c = c
			clear(w.ids)
			if err := w.catchUp(c); err != nil {
				if p.unrecoverable("", err) {
					w.drain()
					w.mu.Unlock()
					return
				}
				w.failed = c
				w.mu.Unlock()
				c.sess.Close()
				continue
			}
		}
		p.mu.Lock()
		w.cur, w.q = w.q, w.cur[:0]
		p.mu.Unlock()
		if len(w.cur) == 0 {
			w.mu.Unlock()
			select {
			case <-w.kick:
			case <-change: // lost or replaced: what was written may need writing again
			case <-p.gone:
				w.mu.Lock()
				w.drain()
				w.mu.Unlock()
				return
			case <-t.closing:
				w.mu.Lock()
				w.drain()
				w.mu.Unlock()
				return
			}
			continue
		}
		err := w.send(c, epoch, w.cur)
		if err != nil {
			w.failed = c
		}
		w.mu.Unlock()
		if err != nil {
			c.sess.Close() // the monitor records the loss
		}
	}
}

// send keeps the items of epoch and writes them on c; w.mu held. Every
// message is kept before any is written: one that a failed write leaves
// behind is written again by the next connection.
func (w *msgWriter) send(c *conn, epoch int64, items []item) error {
	p, t := w.p, w.p.t
	w.idxs = w.idxs[:0]
	for i, it := range items {
		items[i] = item{}
		if it.epoch != epoch { // queued for an incarnation that is gone
			t.finish(p)
			continue
		}
		if it.kind == kindData && !w.seen[it.v] {
			w.seen[it.v] = true
			w.log.limit = max(w.log.limit, t.cfg.Keep*(len(w.seen)+1))
		}
		w.idxs = append(w.idxs, w.log.keep(it))
	}
	return w.write(c, w.idxs)
}

// catchUp writes on a new connection what the peer lacks: the kept
// messages from the one its resume frame names on.
func (w *msgWriter) catchUp(c *conn) error {
	rp, err := c.awaitResume("")
	if err != nil {
		return err
	}
	if rp.off != 0 {
		return fmt.Errorf("%w: the peer has %d bytes of a message of the message stream", errUnrecoverable, rp.off)
	}
	w.idxs, err = w.log.lacking(rp, w.idxs[:0])
	if err != nil {
		return err
	}
	return w.write(c, w.idxs)
}

// write writes the kept messages idxs on c's message stream, batched,
// and counts each as written once its batch was.
func (w *msgWriter) write(c *conn, idxs []int64) error {
	b, batch := w.buf[:0], w.batch[:0]
	for i, idx := range idxs {
		b = w.encode(b, w.log.at(idx).it)
		batch = append(batch, idx)
		if len(b) < batchMax && i < len(idxs)-1 {
			continue
		}
		_, err := c.ctl.Write(b)
		if cap(b) <= 2*batchMax {
			w.buf = b[:0]
		}
		if err != nil {
			return err
		}
		c.t.batchesSent.Add(1)
		for _, j := range batch {
			w.log.written(w.log.at(j))
		}
		b, batch = w.buf[:0], batch[:0]
	}
	w.batch = batch
	return nil
}

// encode appends it's frame (after a bind frame for a transfer new on
// this connection) to b.
func (w *msgWriter) encode(b []byte, it item) []byte {
	h := header{kind: it.kind, dtype: it.dt, len: len(it.payload), step: it.step}
	if it.kind == kindData {
		id := w.ids[it.v]
		if id == 0 {
			id = uint16(len(w.ids) + 1)
			w.ids[it.v] = id
			b = appendFrame(b, header{kind: kindBind, id: id, len: len(it.v)}, it.v)
		}
		h.id = id
		w.p.t.count(len(it.payload))
	}
	return appendFrame(b, h, it.payload)
}

// appendFrame appends a frame of h and payload to b.
func appendFrame[T string | []byte](b []byte, h header, payload T) []byte {
	n := len(b)
	b = append(b, make([]byte, frameHeader)...)
	putHeader(b[n:], h)
	return append(b, payload...)
}

// drain drops what is queued once the peer is gone or the endpoint
// closed; w.mu held.
func (w *msgWriter) drain() {
	p := w.p
	p.mu.Lock()
	w.dead = true
	q := w.q
	w.q = nil
	p.mu.Unlock()
	w.log.drop()
	for range q {
		p.lost.Add(1)
		p.t.finish(p)
	}
}
