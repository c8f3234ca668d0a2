package pserver

import (
	"sync"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
)

// snapshot gathers the persistent variables of a pserver's parts for one
// step: each part copies its own when it finished that step, and the last
// one writes the checkpoint. Parts never wait for each other. A part
// holding dynamic shards cuts them at the step and writes them in the
// background (part.cutTables); the checkpoint of a step with such writes
// is written in the background too, once they are done, so a part's
// loop waits for no file (only for the previous write of its shards, if
// it is still going when the next checkpoint is due).
type snapshot struct {
	write   sync.Mutex // one Save at a time: they share the manifest
	mu      sync.Mutex
	ck      *modelfile.Checkpointer
	log     zerolog.Logger
	parts   int
	pending map[int64]*pendingCk
	bg      sync.WaitGroup // checkpoints written in the background
	err     error          // the first of their errors (under mu)
}

type pendingCk struct {
	left    int
	tensors map[string]*tensor.Tensor
	tables  []<-chan error // the parts' writes of their dynamic shards
}

// add records a part's variables of step and the write of its dynamic
// shards (nil: none); the last part writes the checkpoint. It returns
// the error of a checkpoint written before, in the background.
func (s *snapshot) add(step int64, vars program.Scope, tables <-chan error) error {
	s.mu.Lock()
	if err := s.err; err != nil {
		s.mu.Unlock()
		return err
	}
	p, ok := s.pending[step]
	if !ok {
		p = &pendingCk{left: s.parts, tensors: map[string]*tensor.Tensor{}}
		s.pending[step] = p
	}
	for name, t := range vars {
		c := tensor.New(t.DType, t.Shape)
		c.CopyFrom(t)
		p.tensors[name] = c
	}
	if tables != nil {
		p.tables = append(p.tables, tables)
	}
	p.left--
	done := p.left == 0
	if done {
		delete(s.pending, step)
	}
	s.mu.Unlock()
	if !done {
		return nil
	}
	if len(p.tables) == 0 {
		return s.save(step, p)
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		err := s.save(step, p)
		if err != nil {
			s.mu.Lock()
			if s.err == nil {
				s.err = err
			}
			s.mu.Unlock()
		}
	}()
	return nil
}

// save writes the checkpoint of step once the parts' dynamic shards are
// written.
func (s *snapshot) save(step int64, p *pendingCk) error {
	for _, w := range p.tables {
		if err := <-w; err != nil {
			return err
		}
	}
	s.write.Lock()
	defer s.write.Unlock()
	if err := s.ck.Save(step, p.tensors); err != nil {
		return err
	}
	s.log.Info().Int64("step", step).Str("dir", s.ck.Dir).Msg("checkpoint saved")
	return nil
}

// wait waits for the checkpoints written in the background and returns
// the first of their errors (nil: none, or no snapshot).
func (s *snapshot) wait() error {
	if s == nil {
		return nil
	}
	s.bg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// cutTables cuts the part's dynamic shards at step, between its steps on
// its loop (O(1) a shard), and writes them into their chains in the
// background (dyntable's copy-on-write keeps the cut's instant while the
// next steps change the shards). The part's cuts lock is held until the
// write ends: the next cut, and the export a final pull reads, wait for
// it. The channel yields the write's error; nil: no dynamic shard.
func (p *part) cutTables(ck *modelfile.Checkpointer, step int64) <-chan error {
	if len(p.prog.Tables) == 0 {
		return nil
	}
	done := make(chan error, 1)
	p.cuts.Lock()
	cuts, err := ck.CutTables(step, p.prog.Tables)
	if err != nil {
		p.cuts.Unlock()
		done <- err
		return done
	}
	go func() {
		err := cuts.Write()
		p.cuts.Unlock()
		done <- err
	}()
	return done
}
