package transport

// The send side of one peer: a writer goroutine per (peer, transfer) that
// writes the queued messages in order on the peer's current connection,
// keeps the last Config.Keep written ones in a ring, and on every new
// connection writes again what the peer's resume frame says it lacks
// (docs/wire.md, section 7).

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hashicorp/yamux"
)

type item struct {
	epoch   int64
	kind    byte // kindData, kindDone, kindAbort
	step    int64
	dt      DType
	payload []byte
}

// writer writes the messages of one transfer ("" the control stream) to
// one peer, in order, on that peer's current connection.
type writer struct {
	p       *peer
	name    string
	q       chan item
	dead    bool // under p.mu
	st      *yamux.Stream
	c       *conn // the connection st belongs to
	scratch []byte

	// For the peer's current incarnation (epoch): seq numbers the messages
	// of this transfer; kept holds the last written ones, which a new
	// connection writes again from where the peer's resume frame says it
	// stopped receiving.
	epoch int64
	seq   int64
	kept  []kept // a ring of at most Keep, the oldest at first
	first int
}

type kept struct {
	idx     int64
	it      item
	pending bool // not yet counted as written (TCP.finish)
}

// errUnrecoverable: the peer lacks a message this side no longer holds.
var errUnrecoverable = errors.New("messages lost with a connection are no longer held to be written again")

// run writes the queue of one transfer to one peer. On every new
// connection it first learns from the peer's resume frame what arrived
// and writes the rest again (kept messages, the first one from the byte
// where the peer stopped); when the peer comes back as a new incarnation,
// what was queued for the old one is dropped.
func (w *writer) run() {
	p, t := w.p, w.p.t
	defer t.wg.Done()
	var failed *conn
	var it item
	have := false
	for {
		c, epoch, change, ok := p.session(failed)
		if !ok {
			w.drain(have)
			return
		}
		if epoch != w.epoch {
			w.restart(epoch)
		}
		if c != w.c {
			w.c, w.st = c, nil
			if err := w.catchUp(c); err != nil {
				if errors.Is(err, errUnrecoverable) {
					t.cfg.Log.Error().Str("peer", p.id.String()).Str("transfer", w.name).Err(err).Msg("giving the peer up")
					t.giveUp(p, err, true)
					w.drain(have)
					return
				}
				failed = c
				c.sess.Close() // the monitor records the loss
				continue
			}
		}
		if !have {
			select {
			case it = <-w.q:
				have = true
			case <-change: // lost or replaced: what was written may need writing again
			case <-p.gone:
				w.drain(false)
				return
			case <-t.closing:
				w.drain(false)
				return
			}
			continue // the connection may have changed meanwhile
		}
		have = false
		if it.epoch != epoch { // queued for an incarnation that is gone
			t.finish(p)
			continue
		}
		k := w.keep(it)
		if err := w.write(c, it, 0); err != nil {
			failed = c // the next connection writes it again (it is kept)
			c.sess.Close()
			continue
		}
		w.written(k)
	}
}

// written counts a kept message as written once.
func (w *writer) written(k *kept) {
	if !k.pending {
		return
	}
	k.pending = false
	if k.it.kind == kindData {
		w.p.t.msgsSent.Add(1)
	}
	w.p.t.finish(w.p)
}

// restart forgets what was kept for an old incarnation of the peer.
func (w *writer) restart(epoch int64) {
	for i := range w.kept {
		if w.kept[i].pending {
			w.kept[i].pending = false
			w.p.t.finish(w.p)
		}
	}
	w.kept, w.first, w.seq, w.epoch = w.kept[:0], 0, 0, epoch
}

// keep records it as the next message of this transfer, in place of the
// oldest kept one once Keep are kept (a ring: no copying per message).
func (w *writer) keep(it item) *kept {
	k := kept{idx: w.seq, it: it, pending: true}
	w.seq++
	if len(w.kept) < w.p.t.cfg.Keep {
		w.kept = append(w.kept, k)
		return &w.kept[len(w.kept)-1]
	}
	slot := &w.kept[w.first]
	*slot = k
	w.first = (w.first + 1) % len(w.kept)
	return slot
}

// catchUp writes on a new connection what the peer lacks: the kept
// messages from the one its resume frame names on.
func (w *writer) catchUp(c *conn) error {
	rp, err := c.awaitResume(w.name)
	if err != nil {
		return err
	}
	if rp.count > w.seq || (rp.count == w.seq && rp.off > 0) {
		return fmt.Errorf("%w: %s: the peer has %d messages (and %d bytes), %d were sent", errUnrecoverable, w.name, rp.count, rp.off, w.seq)
	}
	if rp.count < w.seq && (len(w.kept) == 0 || w.kept[w.first].idx > rp.count) {
		return fmt.Errorf("%w: %s: the peer needs message %d", errUnrecoverable, w.name, rp.count)
	}
	for i := range w.kept {
		k := &w.kept[(w.first+i)%len(w.kept)] // oldest first
		if k.idx < rp.count {                 // arrived, whatever its write reported
			w.written(k)
			continue
		}
		off := 0
		if k.idx == rp.count {
			off = int(rp.off)
		}
		if err := w.write(c, k.it, off); err != nil {
			return err
		}
		w.written(k)
	}
	return nil
}

// session waits for a live connection other than failed and returns it
// with the peer's epoch and a channel closed when it changes; false once
// the endpoint closed or the peer is gone.
func (p *peer) session(failed *conn) (*conn, int64, <-chan struct{}, bool) {
	for {
		p.mu.Lock()
		c, epoch, change := p.cur, p.epoch, p.change
		p.mu.Unlock()
		if c != nil && c != failed {
			return c, epoch, change, true
		}
		select {
		case <-change:
		case <-p.gone:
			return nil, 0, nil, false
		case <-p.t.closing:
			return nil, 0, nil, false
		}
	}
}

// drain drops what is queued (and the item in hand) once the peer is gone
// or the endpoint closed.
func (w *writer) drain(inHand bool) {
	p := w.p
	p.mu.Lock()
	w.dead = true
	p.mu.Unlock()
	for i := range w.kept {
		if w.kept[i].pending {
			w.kept[i].pending = false
			p.lost.Add(1)
			p.t.finish(p)
		}
	}
	if inHand {
		p.lost.Add(1)
		p.t.finish(p)
	}
	for {
		select {
		case <-w.q:
			p.lost.Add(1)
			p.t.finish(p)
		default:
			return
		}
	}
}

// write writes it on c, from payload byte off.
func (w *writer) write(c *conn, it item, off int) error {
	if w.st == nil {
		if w.name == "" {
			w.st = c.ctl
		} else {
			st, err := c.sess.OpenStream()
			if err != nil {
				return err
			}
			w.st = st
			w.scratch = make([]byte, 1+len(w.name), frameHeader+8+smallFrame)
			w.scratch[0] = byte(len(w.name))
			copy(w.scratch[1:], w.name)
			if _, err := st.Write(w.scratch); err != nil {
				return err
			}
		}
		if w.scratch == nil {
			w.scratch = make([]byte, 0, frameHeader+8+smallFrame)
		}
	}
	payload := it.payload[off:]
	h := header{kind: it.kind, dtype: it.dt, len: len(payload), step: it.step}
	b := w.scratch[:frameHeader]
	if off > 0 {
		h.kind = kindDataAt
		b = binary.LittleEndian.AppendUint64(b, uint64(off))
	}
	putHeader(b, h)
	if len(payload) <= smallFrame {
		b = append(b, payload...)
		w.count(len(payload))
		_, err := w.st.Write(b)
		return err
	}
	if _, err := w.st.Write(b); err != nil {
		return err
	}
	for len(payload) > 0 {
		k := min(len(payload), writeChunk)
		w.count(k)
		n, err := w.st.Write(payload[:k])
		if err != nil {
			return err
		}
		payload = payload[n:]
	}
	return nil
}

// count adds n payload bytes of a data frame to what was sent (Traffic):
// every byte handed to the connection, again when a reconnect writes it
// again. It counts before the write, as the peer may act on the bytes
// (reply, say Done) before the writer runs again. A write that fails
// still counts whole: the stream may have put part or all of it on the
// wire before it failed (the peer can have read bytes of a write that
// reported 0), so Sent >= what the peer received holds
// (TestTCPResumeMidMessage, TestTCPChaosLinkResends).
func (w *writer) count(n int) {
	if n != 0 && w.name != "" { // the control stream's frames are not payload
		w.p.t.payloadSent.Add(int64(n))
	}
}
