package transport

// The send side of one peer: one writer goroutine for the message stream
// (msgwrite.go: every small message, Done and Abort, batched), and one
// per transfer whose payloads go on a bulk stream of their own (writer,
// below). Each writes its queue in order on the peer's current
// connection, keeps the last written messages in its send log, and on
// every new connection writes again what the peer's resume frame says it
// lacks (docs/wire.md, section 7).

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hashicorp/yamux"
)

type item struct {
	epoch   int64
	kind    byte   // kindData, kindDone, kindAbort
	v       string // the transfer of a data message
	step    int64
	dt      DType
	payload []byte
}

type kept struct {
	idx     int64
	it      item
	pending bool // not yet counted as written (TCP.finish)
}

// sendLog numbers the messages of one stream to the peer's current
// incarnation (epoch) and keeps the last written ones (as references to
// the caller's memory) in a ring, which a new connection writes again
// from where the peer's resume frame says it stopped receiving.
type sendLog struct {
	p     *peer
	name  string // the stream: "" the message stream, else a bulk stream's transfer
	epoch int64
	seq   int64
	kept  []kept // a ring of at most limit, the oldest at first
	first int
	limit int
}

// errUnrecoverable: the peer lacks a message this side no longer holds.
var errUnrecoverable = errors.New("messages lost with a connection are no longer held to be written again")

// keep records it as the next message of the stream, in place of the
// oldest kept one once limit are kept (a ring: no copying per message),
// and returns its number.
func (l *sendLog) keep(it item) int64 {
	k := kept{idx: l.seq, it: it, pending: true}
	l.seq++
	if len(l.kept) < l.limit {
		if l.first != 0 { // the limit grew after the ring wrapped: oldest first again
			r := make([]kept, 0, l.limit)
			r = append(append(r, l.kept[l.first:]...), l.kept[:l.first]...)
			l.kept, l.first = r, 0
		}
		l.kept = append(l.kept, k)
		return k.idx
	}
	slot := &l.kept[l.first]
	if slot.pending { // cannot happen: limit >= the messages a peer's queue holds
		l.written(slot)
	}
	*slot = k
	l.first = (l.first + 1) % len(l.kept)
	return k.idx
}

// at is kept message idx, or nil once it is no longer kept.
func (l *sendLog) at(idx int64) *kept {
	if len(l.kept) == 0 {
		return nil
	}
	oldest := l.kept[l.first].idx
	if idx < oldest || idx >= oldest+int64(len(l.kept)) {
		return nil
	}
	return &l.kept[(l.first+int(idx-oldest))%len(l.kept)]
}

// written counts a kept message as written once.
func (l *sendLog) written(k *kept) {
	if !k.pending {
		return
	}
	k.pending = false
	if k.it.kind == kindData {
		l.p.t.msgsSent.Add(1)
	}
	l.p.t.finish(l.p)
}

// restart forgets what was kept for an old incarnation of the peer.
func (l *sendLog) restart(epoch int64) {
	for i := range l.kept {
		if l.kept[i].pending {
			l.kept[i].pending = false
			l.p.t.finish(l.p)
		}
	}
	l.kept, l.first, l.seq, l.epoch = l.kept[:0], 0, 0, epoch
}

// lacking checks the peer's resume point against what was sent, counts
// what arrived as written, and returns the numbers of the kept messages
// the peer lacks, oldest first (the first of them from byte rp.off).
func (l *sendLog) lacking(rp resumePoint, idxs []int64) ([]int64, error) {
	if rp.count > l.seq || (rp.count == l.seq && rp.off > 0) {
		return idxs, fmt.Errorf("%w: %s: the peer has %d messages (and %d bytes), %d were sent", errUnrecoverable, l.stream(), rp.count, rp.off, l.seq)
	}
	if rp.count < l.seq && (len(l.kept) == 0 || l.kept[l.first].idx > rp.count) {
		return idxs, fmt.Errorf("%w: %s: the peer needs message %d", errUnrecoverable, l.stream(), rp.count)
	}
	for i := range l.kept {
		k := &l.kept[(l.first+i)%len(l.kept)] // oldest first
		if k.idx < rp.count {                 // arrived, whatever its write reported
			l.written(k)
			continue
		}
		idxs = append(idxs, k.idx)
	}
	return idxs, nil
}

func (l *sendLog) stream() string {
	if l.name == "" {
		return "the message stream"
	}
	return l.name
}

// drop counts what is kept unwritten as lost, once the peer is gone or
// the endpoint closed.
func (l *sendLog) drop() {
	for i := range l.kept {
		if l.kept[i].pending {
			l.kept[i].pending = false
			l.p.lost.Add(1)
			l.p.t.finish(l.p)
		}
	}
}

// writer writes one transfer's large messages to one peer, in order, on
// a bulk stream of that peer's current connection.
type writer struct {
	p       *peer
	log     sendLog
	q       chan item
	dead    bool // under p.mu
	st      *yamux.Stream
	c       *conn // the connection st belongs to
	scratch []byte
	idxs    []int64
}

func newWriter(p *peer, v string) *writer {
	t := p.t
	return &writer{p: p, q: make(chan item, t.cfg.QueueDepth),
		log: sendLog{p: p, name: v, epoch: p.epoch, limit: max(t.cfg.Keep, 1)}}
}

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
		if epoch != w.log.epoch {
			w.log.restart(epoch)
		}
		if c != w.c {
			w.c, w.st = c, nil
			if err := w.catchUp(c); err != nil {
				if p.unrecoverable(w.log.name, err) {
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
		idx := w.log.keep(it)
		if err := w.write(c, it, 0); err != nil {
			failed = c // the next connection writes it again (it is kept)
			c.sess.Close()
			continue
		}
		w.log.written(w.log.at(idx))
	}
}

// unrecoverable reports whether err means the peer lacks what cannot be
// written again, and then gives the peer up.
func (p *peer) unrecoverable(stream string, err error) bool {
	if !errors.Is(err, errUnrecoverable) {
		return false
	}
	p.t.cfg.Log.Error().Str("peer", p.id.String()).Str("transfer", stream).Err(err).Msg("giving the peer up")
	p.t.giveUp(p, err, true)
	return true
}

// catchUp writes on a new connection what the peer lacks: the kept
// messages from the one its resume frame names on.
func (w *writer) catchUp(c *conn) error {
	rp, err := c.awaitResume(w.log.name)
	if err != nil {
		return err
	}
	w.idxs, err = w.log.lacking(rp, w.idxs[:0])
	if err != nil {
		return err
	}
	for i, idx := range w.idxs {
		off := 0
		if i == 0 {
			off = int(rp.off)
		}
		k := w.log.at(idx)
		if err := w.write(c, k.it, off); err != nil {
			return err
		}
		w.log.written(k)
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
	w.log.drop()
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
		st, err := c.sess.OpenStream()
		if err != nil {
			return err
		}
		w.st = st
		name := w.log.name
		w.scratch = make([]byte, 1+len(name), frameHeader+8+smallFrame)
		w.scratch[0] = byte(len(name))
		copy(w.scratch[1:], name)
		if _, err := st.Write(w.scratch); err != nil {
			return err
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
		w.p.t.count(len(payload))
		_, err := w.st.Write(b)
		return err
	}
	if _, err := w.st.Write(b); err != nil {
		return err
	}
	for len(payload) > 0 {
		k := min(len(payload), writeChunk)
		w.p.t.count(k)
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
func (t *TCP) count(n int) {
	if n != 0 {
		t.payloadSent.Add(int64(n))
	}
}
