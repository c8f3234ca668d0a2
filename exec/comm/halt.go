package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/halt"
	"github.com/psgraph/psgraph/transport"
)

// The stop protocol's messages (package halt; docs/wire.md), each sent at
// most once per (sender, receiver incarnation) and keyed by CtrlStep: a
// pserver's ask to a trainer (8 bytes: who asked first, trainer i as i,
// pserver j as -1-j), a trainer's proposal to the hub, pserver-0 (8 bytes
// the steps it started, 8 bytes 1 when it ended there), and the hub's
// decision (8 bytes: the steps the job runs).
const (
	HaltAskVar     = "psgraph/halt/ask"
	HaltProposeVar = "psgraph/halt/propose"
	HaltLastVar    = "psgraph/halt/last"
)

// HaltSpecs is what a node of role accepts of the stop protocol.
func HaltSpecs(role ir.Role) []transport.Spec {
	if role == ir.PServerRole {
		return []transport.Spec{{Var: HaltProposeVar, DType: transport.I64, Bytes: 16}}
	}
	return []transport.Spec{{Var: HaltAskVar, DType: transport.I64, Bytes: 8}, {Var: HaltLastVar, DType: transport.I64, Bytes: 8}}
}

// hub is the pserver that gathers the trainers' proposals and decides.
var hub = transport.PServer(0)

func i64s(vs ...int64) []byte {
	b := make([]byte, 8*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
	return b
}

func i64(b []byte, i int) int64 { return int64(binary.LittleEndian.Uint64(b[8*i:])) }

// origin names who asked first (the ask's payload).
func origin(v int64) string {
	if v < 0 {
		return transport.PServer(int(-1 - v)).String()
	}
	return transport.Trainer(int(v)).String()
}

// Halt is a trainer's side of its job's stop (halt.Trainer, whose I/O it
// does): it takes the pservers' asks, the hub's decision and this
// process's own signal as they come, tells the hub its proposal, and
// answers the training loop whether a step may start (Enter).
type Halt struct {
	c   *Trainer
	log zerolog.Logger

	mu      sync.Mutex
	m       *halt.Trainer
	asked   chan struct{} // closed once the job was asked to stop
	decided chan struct{} // closed when the decision arrived
	isAsked bool
	err     error

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartHalt starts the trainer's part in its job's stop: stop (this
// process's SIGTERM or SIGINT) and a pserver's ask ask the job to stop.
// Started must follow once the trainer knows its first step; Close ends it.
func (c *Trainer) StartHalt(stop <-chan struct{}) *Halt {
	ctx, cancel := context.WithCancel(context.Background())
	h := &Halt{c: c, log: c.log, m: halt.NewTrainer(c.async), asked: make(chan struct{}), decided: make(chan struct{}), cancel: cancel}
	h.goRun(func() {
		select {
		case <-stop:
			h.ask(ctx, func() {
				h.log.Info().Msg("asked to stop (a signal to this trainer): the job finishes the steps its trainers agree on, checkpoints and ends")
			})
		case <-ctx.Done():
		}
	})
	for _, p := range c.peers {
		h.goRun(func() { h.recvAsk(ctx, p) })
	}
	h.goRun(func() { h.recvLast(ctx) })
	h.goRun(func() { watchRestarts(ctx, c.ep, hub, func() { h.event(ctx, halt.HubRestarted{}) }) })
	return h
}

func (h *Halt) goRun(f func()) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		f()
	}()
}

// recv receives v@CtrlStep from p into buf, waiting for p while it is
// lost; false when p finished, the endpoint closed or ctx ended.
func (h *Halt) recv(ctx context.Context, p transport.NodeID, v string, buf []byte) bool {
	for {
		err := h.c.ep.Recv(ctx, p, CtrlStep, v, buf)
		if err == nil {
			return true
		}
		if !lostPeer(err) || ctx.Err() != nil || h.c.ep.WaitPeer(ctx, p) != nil {
			return false
		}
	}
}

func (h *Halt) recvAsk(ctx context.Context, p transport.NodeID) {
	buf := make([]byte, 8)
	if h.recv(ctx, p, HaltAskVar, buf) {
		h.ask(ctx, func() {
			h.log.Info().Str("from", p.String()).Str("asked_by", origin(i64(buf, 0))).Msg("the job is asked to stop: it finishes the steps its trainers agree on, checkpoints and ends")
		})
	}
}

// ask feeds the machine an ask, logged (say) when it is the first.
func (h *Halt) ask(ctx context.Context, say func()) {
	h.mu.Lock()
	first := !h.isAsked
	h.mu.Unlock()
	if first {
		say()
	}
	h.event(ctx, halt.Asked{})
}

func (h *Halt) recvLast(ctx context.Context) {
	buf := make([]byte, 8)
	if h.recv(ctx, hub, HaltLastVar, buf) {
		h.log.Info().Int64("steps", i64(buf, 0)).Msgf("the job's trainers agreed: it stops after step %d", i64(buf, 0))
		h.event(ctx, halt.Decided{Steps: i64(buf, 0)})
	}
}

// watchRestarts calls f each time peer p comes back as a new process,
// until ctx ends.
func watchRestarts(ctx context.Context, ep transport.Endpoint, p transport.NodeID, f func()) {
	seen, next := ep.Restarts(p)
	for {
		select {
		case <-next:
		case <-ctx.Done():
			return
		}
		var n int64
		n, next = ep.Restarts(p)
		if n != seen {
			seen = n
			f()
		}
	}
}

// event feeds the machine and does what it answers.
func (h *Halt) event(ctx context.Context, ev halt.TrainerEvent) halt.TrainerAction {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.m.Step(ev)
	switch ev.(type) {
	case halt.Asked, halt.Decided:
		if !h.isAsked {
			h.isAsked = true
			close(h.asked)
		}
	}
	if _, ok := ev.(halt.Decided); ok && h.m.Last() >= 0 {
		select {
		case <-h.decided:
		default:
			close(h.decided)
		}
	}
	switch a := a.(type) {
	case halt.Propose:
		final := int64(0)
		if a.Final {
			final = 1
		}
		if err := h.c.ep.Send(ctx, hub, CtrlStep, HaltProposeVar, transport.I64, i64s(a.Steps, final)); err != nil && ctx.Err() == nil && h.err == nil {
			h.err = fmt.Errorf("telling %s this trainer's steps for the job's stop: %w", hub, err)
			h.wake()
		}
	case halt.Fail:
		if h.err == nil {
			h.err = a.Err
			h.wake()
		}
	}
	return a
}

// wake wakes an Enter waiting for the decision (h.mu held).
func (h *Halt) wake() {
	select {
	case <-h.decided:
	default:
		close(h.decided)
	}
}

// Asked is closed once the job was asked to stop.
func (h *Halt) Asked() <-chan struct{} { return h.asked }

// Started says the trainer's first step.
func (h *Halt) Started(first int64) { h.event(context.Background(), halt.Started{First: first}) }

// Ended says the trainer ran steps steps and runs no more.
func (h *Halt) Ended(steps int64) { h.event(context.Background(), halt.Ended{Steps: steps}) }

// Enter says whether step k may start: at once while the job runs; once
// the job was asked to stop, in a sync job only after its trainers agreed
// on the last step (it waits for that, riding out a lost hub as a receive
// does), in an async one never.
func (h *Halt) Enter(ctx context.Context, k int64) (bool, error) {
	logged := false
	for {
		h.mu.Lock()
		a := h.m.Enter(k)
		err, decided := h.err, h.decided
		h.mu.Unlock()
		if err != nil {
			return false, err
		}
		switch a.(type) {
		case halt.Run:
			return true, nil
		case halt.Stop:
			return false, nil
		}
		if !logged {
			h.log.Info().Int64("step", k).Msg("waiting for the job's trainers to agree on the last step")
			logged = true
		}
		if err := h.awaitDecision(ctx, decided); err != nil {
			return false, err
		}
	}
}

// awaitDecision waits until decided is closed; a hub lost meanwhile gets
// the timeout to come back.
func (h *Halt) awaitDecision(ctx context.Context, decided <-chan struct{}) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-decided:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if h.c.connected(hub) {
				continue
			}
			if err := h.c.waitBack(ctx, hub); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return h.c.pserverGone(hub, errors.New("lost while the job agreed on its last step"), err)
			}
		}
	}
}

// Close ends the trainer's part in the stop.
func (h *Halt) Close() {
	h.cancel()
	h.wg.Wait()
}

// StartHalt starts a pserver's part in its job's stop: stop (this
// process's SIGTERM or SIGINT) makes it ask every trainer to stop, and it
// asks again a trainer that comes back as a new process; the hub,
// pserver-0, also takes the trainers' proposals, passes an ask on and, in
// a sync job, decides the last step (halt.Hub). The pserver serves on
// meanwhile, until the trainers are done. The returned func ends it.
func (c *PServer) StartHalt(stop <-chan struct{}) func() {
	ctx, cancel := context.WithCancel(context.Background())
	self := c.ep.Self()
	isHub := self == hub
	m := halt.NewHub(c.trainers, c.async, isHub)
	var mu sync.Mutex
	asker := int64(-1 - int64(self.Index))
	first := true
	do := func(ev halt.HubEvent, who int64) {
		mu.Lock()
		defer mu.Unlock()
		s := m.Step(ev)
		if first && m.Asking() {
			first, asker = false, who
		}
		for _, i := range s.Ask {
			if err := c.ep.Send(ctx, transport.Trainer(i), CtrlStep, HaltAskVar, transport.I64, i64s(asker)); err != nil && ctx.Err() == nil {
				c.log.Warn().Err(err).Int("trainer", i).Msg("could not ask the trainer to stop")
			}
		}
		if len(s.Decide) > 0 {
			c.log.Info().Int64("steps", s.Steps).Msgf("the trainers agreed: the job stops after step %d", s.Steps)
		}
		for _, i := range s.Decide {
			if err := c.ep.Send(ctx, transport.Trainer(i), CtrlStep, HaltLastVar, transport.I64, i64s(s.Steps)); err != nil && ctx.Err() == nil {
				c.log.Warn().Err(err).Int("trainer", i).Msg("could not tell the trainer the job's last step")
			}
		}
	}
	var wg sync.WaitGroup
	goRun := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	goRun(func() {
		select {
		case <-stop:
			c.log.Info().Msg("asked to stop (a signal to this pserver): asking the trainers to stop; serving until they are done")
			do(halt.Signal{}, asker)
		case <-ctx.Done():
		}
	})
	if isHub {
		goRun(func() {
			buf := make([]byte, 16)
			for {
				k, err := c.ep.RecvAny(ctx, HaltProposeVar, buf)
				if err != nil {
					var pe *transport.PeerError
					if lostPeer(err) && errors.As(err, &pe) && ctx.Err() == nil && c.ep.WaitPeer(ctx, pe.Peer) == nil {
						continue
					}
					return
				}
				do(halt.Proposed{Trainer: k.Src.Index, Steps: i64(buf, 0), Final: i64(buf, 1) == 1}, int64(k.Src.Index))
			}
		})
	}
	for i := range c.trainers {
		goRun(func() {
			watchRestarts(ctx, c.ep, transport.Trainer(i), func() { do(halt.Restarted{Trainer: i}, asker) })
		})
	}
	return func() {
		cancel()
		wg.Wait()
	}
}
