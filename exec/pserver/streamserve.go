package pserver

import (
	"fmt"

	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/program"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/tensor"
)

// sinkChunk is how many gradient bytes a streamed part takes from the
// transport at a time: a few Streamer pieces, within L2.
const sinkChunk = 64 << 10

// streamedPart runs a pserver part's update with a Streamer: one gradient
// piece (async, or a single trainer) goes from the connection straight
// into the update, chunk by chunk, so neither the gradient nor the
// update's temporaries exist block-sized and the update overlaps the
// transfer. With several pieces per step the mean is gathered first, as
// Accumulate does (into the accumulate op's own tensor), and then streamed
// through the update, which still saves the temporaries and a pass per op.
type streamedPart struct {
	s    *program.Streamer
	c    *comm.NetComm
	g    program.StreamGrad
	mean *tensor.Tensor // several pieces: the accumulate op's output
	buf  []byte         // one piece: the chunk the transport reads into
	f    []float32      // buf as float32s
	err  error          // the first Chunk error of this step
	step int64
}

// newStreamedPart returns the streaming runner of a compiled part, or nil
// when the part cannot stream (logged at debug level with the reason).
func newStreamedPart(prog *program.Program, c *comm.NetComm, log zerolog.Logger) *streamedPart {
	s, why := program.NewStreamer(prog, program.DefaultStreamChunk)
	if s == nil {
		log.Debug().Str("part", prog.Graph.File).Str("reason", why).Msg("update runs whole")
		return nil
	}
	sp := &streamedPart{s: s, c: c, g: s.Grad()}
	if sp.g.Count == 1 {
		sp.f = make([]float32, sinkChunk/4)
		sp.buf = (&tensor.Tensor{DType: tensor.F32, F: sp.f}).Bytes()
		return sp
	}
	for _, op := range prog.Graph.Ops {
		if op.Type == "accumulate" {
			sp.mean = prog.Scope[op.Outputs[0]]
		}
	}
	return sp
}

// run is one step of the part.
func (sp *streamedPart) run(rt *program.NodeRuntime) error {
	if err := sp.s.Begin(rt); err != nil {
		return err
	}
	if sp.mean != nil {
		if err := sp.c.Accumulate(rt.Ctx, rt.StepNum, sp.g.Attrs, sp.g.Count, sp.mean); err != nil {
			return err
		}
		if err := sp.s.Chunk(0, sp.mean.F); err != nil {
			return err
		}
		return sp.s.End(rt)
	}
	sp.err, sp.step = nil, rt.StepNum
	if err := sp.c.AccumulateSink(rt.Ctx, rt.StepNum, sp.g.Attrs, sp); err != nil {
		return err
	}
	if sp.err != nil {
		return sp.err
	}
	return sp.s.End(rt)
}

// Next implements transport.Sink.
func (sp *streamedPart) Next(int) []byte { return sp.buf }

// Filled implements transport.Sink: the bytes [off, off+len(b)) of the
// gradient go through the update.
func (sp *streamedPart) Filled(off int, b []byte) {
	if sp.err != nil {
		return
	}
	if err := sp.s.Chunk(off/4, sp.f[:len(b)/4]); err != nil {
		// The transport hands every byte once and in order, unless the
		// sender restarted in the middle of the message and sent it anew:
		// the update already applied its first part.
		sp.err = fmt.Errorf("the gradient %s of step %d was sent anew (its trainer restarted) after %d of its bytes had been applied: this block is no longer consistent; rerun the job from its last checkpoint (psgraph train --checkpoint-dir): %w", sp.g.Var, sp.step, off, err)
	}
}
