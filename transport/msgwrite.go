package transport

// The writer of a peer's message stream (docs/wire.md, section 3): Send
// appends a small message (and Done, Abort) to the peer's queue and wakes
// this one goroutine, which takes everything queued at once and writes it
// as one batch: the frames back to back in one stream write, one yamux
// frame, so the messages a node sends a peer together (a trainer's
// gradients, a pserver's parameters of one step) cost the peer one read
// and one wake-up. A transfer is named by a 2-byte id bound on first use
// on each connection (a bind frame). No timer: what queues while a batch
// is being written goes out in the next.

import "fmt"

const batchMax = 256 << 10 // a batch is written once it holds this many bytes

// msgWriter writes one peer's message stream.
type msgWriter struct {
	p    *peer
	log  sendLog
	q    []item        // under p.mu: queued, not yet taken
	kick chan struct{} // something was queued
	dead bool          // under p.mu

	c     *conn             // the connection ids are bound on
	ids   map[string]uint16 // transfer -> id on c
	seen  map[string]bool   // transfers ever sent inline (the log keeps Keep messages of each)
	cur   []item
	idxs  []int64
	buf   []byte
	batch []int64 // the log's numbers of the messages in buf
}

func newMsgWriter(p *peer) *msgWriter {
	t := p.t
	return &msgWriter{p: p, kick: make(chan struct{}, 1), ids: map[string]uint16{}, seen: map[string]bool{},
		log: sendLog{p: p, epoch: p.epoch, limit: max(t.cfg.Keep, t.cfg.QueueDepth)}}
}

// add queues it; the caller holds p.mu.
func (w *msgWriter) add(it item) {
	w.q = append(w.q, it)
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *msgWriter) run() {
	p, t := w.p, w.p.t
	defer t.wg.Done()
	var failed *conn
	for {
		c, epoch, change, ok := p.session(failed)
		if !ok {
			w.drain()
			return
		}
		if epoch != w.log.epoch {
			w.log.restart(epoch)
		}
		if c != w.c {
			w.c = c
			clear(w.ids)
			if err := w.catchUp(c); err != nil {
				if p.unrecoverable("", err) {
					w.drain()
					return
				}
				failed = c
				c.sess.Close() // the monitor records the loss
				continue
			}
		}
		p.mu.Lock()
		w.cur, w.q = w.q, w.cur[:0]
		p.mu.Unlock()
		if len(w.cur) == 0 {
			select {
			case <-w.kick:
			case <-change: // lost or replaced: what was written may need writing again
			case <-p.gone:
				w.drain()
				return
			case <-t.closing:
				w.drain()
				return
			}
			continue
		}
		// Every message is kept before any is written: one that a failed
		// write leaves behind is written again by the next connection.
		w.idxs = w.idxs[:0]
		for i, it := range w.cur {
			w.cur[i] = item{}
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
		if err := w.write(c, w.idxs); err != nil {
			failed = c
			c.sess.Close()
		}
	}
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

// drain drops what is queued once the peer is gone or the endpoint closed.
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
