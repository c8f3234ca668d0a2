package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/replicate"
	"github.com/psgraph/psgraph/transport"
)

// statePusher sends trainer 0's model state (the model's variables it
// holds: batch_norm's running statistics, a parameter placed on it) to
// pserver 0, which holds the newest for the serving replicas that follow
// the job (pserver.Publisher; docs/serving.md). Trainers do not listen,
// so the trainer dials, as a replica does (transport.DialReplica: the
// job's token and plan hash), and writes the state as whole deltas. The
// loop copies the state between steps, at most every pushEvery, into a
// buffer no send holds (Offer never waits); a goroutine sends the newest
// copy, again after a lost connection or a restarted pserver 0, which
// answers each with an ack once it holds it.
type statePusher struct {
	cfg  transport.Config
	addr string
	log  zerolog.Logger

	mu     sync.Mutex
	bufs   [3]*stateCopy
	newest *stateCopy // the newest copy (nil: none yet)
	sent   *stateCopy // the copy being sent
	acked  int64      // the newest step pserver 0 acknowledged (-1: none)
	ackCh  chan struct{}
	taken  time.Time
	wake   chan struct{}
}

// stateCopy is the state at one step.
type stateCopy struct {
	step   int64
	names  []string
	widths []int // values a row (the variable's shape past its first axis)
	vals   [][]float32
}

// pushEvery is how often the loop copies the state for pserver 0: as
// often as a pserver snapshots its dense blocks (pserver.DeltaInterval/2).
const pushEvery = 125 * time.Millisecond

// replicaIndexOfPusher is the replica index trainer 0's pusher dials as:
// far above any serving replica's.
const replicaIndexOfPusher = 1 << 20

func newStatePusher(token string, jobHash string, tc *tls.Config, addr string, log zerolog.Logger) *statePusher {
	return &statePusher{
		cfg:  transport.Config{Self: transport.Replica(replicaIndexOfPusher), Token: []byte(token), JobHash: jobHash, TLS: tc},
		addr: addr, log: log.With().Str("to", "pserver-0").Logger(), acked: -1,
		ackCh: make(chan struct{}, 1), wake: make(chan struct{}, 1),
	}
}

// Offer copies the state of step if one is due (on the loop, between
// steps).
func (p *statePusher) Offer(step int64, vars program.Scope) {
	if time.Since(p.taken) < pushEvery {
		return
	}
	p.take(step, vars)
}

func (p *statePusher) take(step int64, vars program.Scope) {
	p.taken = time.Now()
	p.mu.Lock()
	var c *stateCopy
	for i, b := range p.bufs {
		if b == nil {
			b = &stateCopy{}
			p.bufs[i] = b
		}
		if b != p.newest && b != p.sent {
			c = b
			break
		}
	}
	p.mu.Unlock()
	// c is neither the newest nor being sent: no one reads it
	c.step = step
	if c.names == nil {
		for name := range vars {
			c.names = append(c.names, name)
		}
		slices.Sort(c.names)
		c.vals = make([][]float32, len(c.names))
		for _, name := range c.names {
			w := 1
			if sh := vars[name].Shape; len(sh) > 1 {
				w = sh[1:].Numel()
			}
			c.widths = append(c.widths, w)
		}
	}
	for i, name := range c.names {
		c.vals[i] = append(c.vals[i][:0], vars[name].F...)
	}
	p.mu.Lock()
	p.newest = c
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Flush copies the last step's state and waits until pserver 0 holds it
// (at most a minute).
func (p *statePusher) Flush(ctx context.Context, step int64, vars program.Scope) error {
	p.take(step, vars)
	deadline := time.After(time.Minute)
	for {
		p.mu.Lock()
		acked := p.acked
		p.mu.Unlock()
		if acked >= step {
			return nil
		}
		select {
		case <-p.ackCh:
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("pserver-0 did not take the state of step %d within a minute", step)
		}
	}
}

// run sends the newest state until ctx ends, dialing pserver 0 again after
// a lost connection.
func (p *statePusher) run(ctx context.Context) {
	backoff := 20 * time.Millisecond
	for ctx.Err() == nil {
		c, _, err := transport.DialReplica(ctx, p.cfg, transport.PServer(0), p.addr)
		if errors.Is(err, transport.ErrAuth) || errors.Is(err, transport.ErrJobMismatch) {
			p.log.Error().Err(err).Msg("pserver-0 refused this trainer's state push; the serving replicas do not get its state")
			return
		}
		if err == nil {
			backoff = 20 * time.Millisecond
			stop := context.AfterFunc(ctx, func() { c.Close() })
			err = p.send(ctx, c)
			stop()
			c.Close()
			p.log.Debug().Err(err).Msg("the state push ended; dialing again")
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// send writes the newest state on c whenever there is a newer one (at
// once on a new connection: a restarted pserver holds none).
func (p *statePusher) send(ctx context.Context, c net.Conn) error {
	if err := replicate.WritePushHello(c); err != nil {
		return err
	}
	w := replicate.NewWriter(c)
	var last *stateCopy
	lastStep := int64(-1)
	for {
		p.mu.Lock()
		cp := p.newest
		if cp != nil && (cp != last || cp.step != lastStep) {
			p.sent = cp
		} else {
			cp = nil
		}
		p.mu.Unlock()
		if cp == nil {
			select {
			case <-p.wake:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := writeState(w, cp)
		if err == nil {
			c.SetReadDeadline(time.Now().Add(time.Minute))
			err = replicate.ReadAck(c)
		}
		p.mu.Lock()
		p.sent = nil
		if err == nil {
			p.acked = max(p.acked, cp.step)
		}
		p.mu.Unlock()
		if err != nil {
			return err
		}
		last, lastStep = cp, cp.step
		select {
		case p.ackCh <- struct{}{}:
		default:
		}
	}
}

func writeState(w *replicate.Writer, c *stateCopy) error {
	if err := w.Begin(c.step, true); err != nil {
		return err
	}
	for i, name := range c.names {
		if err := w.Rows(replicate.Rows{Name: name, Stride: 1, Width: c.widths[i], Values: c.vals[i]}); err != nil {
			return err
		}
	}
	return w.End()
}
