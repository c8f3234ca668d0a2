package rejoin

import "fmt"

// Part is one pserver part's view of its trainers while it serves: the
// incarnation of each trainer that has this part's parameters. A trainer
// that came back as a new process learns its start step from the
// parameters the pservers send it (it joins at the newest step every
// transfer has), so before each receive the part sends its current
// parameters to every trainer whose incarnation changed, whichever trainer
// it waits for: a part ahead waits for a surviving trainer, which waits
// for the parts behind.
//
// Parts can be two steps apart: a trainer sends a part its gradient of
// step k as soon as that part's parameters of k arrived, before the other
// parts' (blocks the step computes independently), so a surviving trainer
// in step k may have brought one part to k+1 while another still serves
// k-1, waiting for the gradient of k-1 that the killed trainer wrote to it
// last and lost with its process. Each part therefore sends a newcomer its
// parameters for its step and the two before, and the newcomer joins at
// the newest step every transfer has (comm.Trainer.LearnStep): the oldest
// part's step, whose gradient it then sends. With one step here the
// newcomer joined past the part behind, which waited for it for ever
// (TestStreamRestartedTrainerTrainsOnce hung about once in 300 runs).
type Part struct {
	// Known is the incarnation of each trainer that has this part's
	// parameters: the one the pserver started with.
	Known []int64
	// First is the step the part started at.
	First int64
}

// NewPart returns the view of a part that started at step first with the
// trainers at incarnations started.
func NewPart(started []int64, first int64) *Part {
	return &Part{Known: append([]int64(nil), started...), First: first}
}

// SendParams: send the part's current parameters to trainer To for steps
// From..Through (other parts may be up to two steps behind this one; the
// pservers drop the newcomer's pieces for older steps as stale).
type SendParams struct {
	To            int
	From, Through int64
}

// Check is the part's decision before it receives a piece of step: now
// holds every trainer's incarnation. It records them as having the
// parameters it says to send.
func (p *Part) Check(now []int64, step int64) []SendParams {
	var out []SendParams
	for i, n := range now {
		if i < len(p.Known) && n != p.Known[i] {
			p.Known[i] = n
			out = append(out, SendParams{To: i, From: max(step-2, p.First), Through: step})
		}
	}
	return out
}

// TableRestart is the error of a sync pserver serving a sharded table
// that waits for a table message of step from trainer, which came back as
// a new process (incarnation now; it started with started): a sync shard
// serves and updates every trainer at every step, and a restarted trainer
// joins at a step its dense parameters say, which the shard's step need
// not be, so it would wait forever (async shards take whatever comes).
// nil when the trainer is the one the pserver started with.
func TableRestart(trainer int, v string, step, started, now int64) error {
	if now == started {
		return nil
	}
	return fmt.Errorf("trainer-%d restarted (a new process) while this pserver waited for its %s of step %d; a sync job with lookup tables cannot take a restarted trainer yet: stop the job and rerun it from its checkpoints (psgraph train --checkpoint-dir)", trainer, v, step)
}
