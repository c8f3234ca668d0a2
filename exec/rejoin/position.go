package rejoin

import (
	"encoding/binary"
	"fmt"
	"math"
)

// A restarted pserver and the running trainers meet again through two
// control transfers, exchanged with every incarnation of a pserver (so a
// fresh job, a whole-job rerun and a restart into a running job take one
// code path):
//
//   - position, trainer -> pserver, when the trainer first talks to a
//     pserver incarnation: the step of the last gradients it sent to that
//     pserver (any incarnation; before any, its start step - 1), the
//     oldest step of that pserver's parameters it has not received yet
//     (both Learning when the trainer learns its start step from the
//     pservers), and whether it rejoins (it talked to an earlier
//     incarnation: the pserver restarted into a running job).
//   - resume, pserver -> trainer, once it heard every trainer: the step it
//     starts at (sync) or the step of the parameters it sent that trainer
//     (async).
//
// The trainer then re-sends its last gradients of each transfer whose
// step the pserver has not applied (the transport dropped what was queued
// for the old process), and carries on. See docs/runtime.md.

// Learning marks a position of a trainer that learns its start step.
const Learning = math.MinInt64

// Position is what a trainer tells a pserver incarnation about itself.
// Steps and Batch are the trainer's run (--steps, --batch, as resolved
// from the model): every trainer of a job must have the same, and a
// pserver that hears two different stops the job (CheckRun).
type Position struct {
	Sent   int64 // step of the last gradients sent to this pserver; start-1 before any
	Need   int64 // oldest step of this pserver's parameters not received yet
	Rejoin bool  // the trainer talked to an earlier incarnation of it
	Steps  int64 // the trainer's last step (its run's steps)
	Batch  int64 // the trainer's batch
}

func (p Position) Known() bool { return p.Sent != Learning }

// PositionBytes is the size of an encoded Position.
const PositionBytes = 40

// Where is a trainer's position with respect to one pserver, from its
// records of that pserver's transfers: the trainer's first step (Learning
// until it learned it), what it last sent on each transfer (a request does
// not count: it carries no gradient), the last step it received of each
// parameter (Learning: none yet), the last step it received of each reply
// to its gradients (train.clip.norm's partial norm, sent by the pserver
// once it has every trainer's gradients of the step), and its run's steps
// and batch.
//
// A trainer still waiting for a reply of step k has not finished step k
// with this pserver, whatever it sent: the pserver must take its
// gradients of k again (it re-sends them) and answer, so its Sent is at
// most k-1. Counting those gradients as sent would start a restarted
// pserver at k+1, where no reply of k comes, and the trainer could not
// go on (ResumeConflict).
func Where(start int64, sent []SentState, got, replies []int64, steps, batch int64) Position {
	if start == Learning {
		return Position{Sent: Learning, Need: Learning, Steps: steps, Batch: batch}
	}
	pos := Position{Sent: start - 1, Need: math.MaxInt64, Steps: steps, Batch: batch}
	for _, m := range sent {
		if m.Has && !m.Request && m.Step > pos.Sent {
			pos.Sent = m.Step
		}
	}
	for _, k := range got {
		need := start
		if k != Learning {
			need = k + 1
		}
		pos.Need = min(pos.Need, need)
	}
	for _, k := range replies {
		if k == Learning {
			k = start - 1
		}
		pos.Sent = min(pos.Sent, k) // waits for the reply of k+1: not done with k+1
	}
	if pos.Need == math.MaxInt64 { // receives nothing from it
		pos.Need = pos.Sent + 1
	}
	return pos
}

// bytes: Sent, Need (int64), Rejoin (1 byte, then 7 zero bytes), Steps,
// Batch (int64), little-endian: 40 bytes.
func (p Position) Bytes() []byte {
	b := make([]byte, PositionBytes)
	binary.LittleEndian.PutUint64(b, uint64(p.Sent))
	binary.LittleEndian.PutUint64(b[8:], uint64(p.Need))
	if p.Rejoin {
		b[16] = 1
	}
	binary.LittleEndian.PutUint64(b[24:], uint64(p.Steps))
	binary.LittleEndian.PutUint64(b[32:], uint64(p.Batch))
	return b
}

// DecodePosition reads a position written by Position.Bytes.
func DecodePosition(b []byte) Position {
	return Position{Sent: int64(binary.LittleEndian.Uint64(b)), Need: int64(binary.LittleEndian.Uint64(b[8:])), Rejoin: b[16] == 1,
		Steps: int64(binary.LittleEndian.Uint64(b[24:])), Batch: int64(binary.LittleEndian.Uint64(b[32:]))}
}

// CheckRun compares trainer i's run with trainer j's, heard before it: the
// trainers of a job read the data stream at (step x trainers + index) x
// batch, so their batches must be equal, and a sync pserver waits for every
// trainer's gradients at every step, so their steps must be equal too
// (TestMismatchedTrainerRefused).
func CheckRun(i int, p Position, j int, q Position, async bool) error {
	const fix = "give every trainer the same %s (or leave it out on all of them, to use the model's)"
	if p.Batch != q.Batch {
		return fmt.Errorf("trainer-%d was started with --batch %d but trainer-%d with --batch %d: every trainer reads its own batch at (step x trainers + index) x batch of the data stream, so the batches of a job must be equal; "+fix, i, p.Batch, j, q.Batch, "--batch")
	}
	if !async && p.Steps != q.Steps {
		return fmt.Errorf("trainer-%d was started with --steps %d but trainer-%d with --steps %d (the flag, or the model's train.steps or train.epochs when it is left out): in a sync job every pserver step waits for the gradients of every trainer, so one trainer stopping early would hang the others; "+fix, i, p.Steps, j, q.Steps, "--steps")
	}
	return nil
}

// StepBytes encodes a step: a resume message.
func StepBytes(s int64) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, uint64(s))
	return b
}
