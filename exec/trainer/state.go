package trainer

import (
	"fmt"
	"maps"
	"slices"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
)

// trainerState is a distributed trainer's part of the job's checkpoints:
// the persistent variables it holds, which no pserver has (the model's own
// state, dsl.Graph.ModelState: batch_norm's running statistics; a
// parameter placed on the trainer and its optimizer's state;
// docs/split.md). Each trainer keeps its own, as node trainer-<index>
// beside the pservers' files, saved at the steps they checkpoint theirs;
// nil when it holds none or the run has no checkpoints.
type trainerState struct {
	ck   *modelfile.Checkpointer
	vars program.Scope
}

// newTrainerState is a distributed trainer's trainerState, made once
// the program is compiled (nil: nothing to checkpoint).
func newTrainerState(r *run) *trainerState {
	ck, vars := r.opt.Checkpoint, program.PersistentOf(r.prog)
	if ck == nil || ck.Dir == "" || len(vars) == 0 && !r.g.Data.IsOnline() {
		return nil
	}
	own := *ck
	own.Meta = nil // its own: an online source's position goes in it
	own.Node = fmt.Sprintf("trainer-%d", r.opt.TrainerIndex)
	if own.Model == "" {
		own.Model = r.g.Name
	}
	own.Prom = r.opt.Prom
	return &trainerState{ck: &own, vars: vars}
}

// checkpointer is the trainer's own checkpointer (nil: none).
func (s *trainerState) checkpointer() *modelfile.Checkpointer {
	if s == nil {
		return nil
	}
	return s.ck
}

// save writes the state as of the start of step, and more tensors of
// the run's own (an online run's window) beside it.
func (s *trainerState) save(step int64, more map[string]*tensor.Tensor) error {
	if s == nil {
		return nil
	}
	ts := s.vars
	if len(more) > 0 {
		ts = maps.Clone(s.vars)
		maps.Copy(ts, more)
	}
	return s.ck.Save(step, ts)
}

// restore reads the state of the newest checkpoint at or before step, the
// step the job resumes at: that step's own after a rerun of the whole job
// (the rerun resumes where every node has a checkpoint, trainers with
// state included: launch.Resume), an earlier one for a trainer restarted
// into a running job. Without any, the state keeps its initial values,
// and the log says so. It fills the tensors of optional the checkpoint
// holds (an online run's window) and returns the checkpoint's step (-1:
// none) and which of them it filled.
func (s *trainerState) restore(step int, optional map[string]*tensor.Tensor, log zerolog.Logger) (int64, map[string]bool, error) {
	if s == nil {
		return -1, nil, nil
	}
	m, ok, err := s.ck.Manifest()
	if err != nil {
		return -1, nil, err
	}
	at := int64(-1)
	for _, c := range m.Steps {
		if c <= int64(step) {
			at = max(at, c)
		}
	}
	if !ok || at < 0 {
		if len(s.vars) > 0 {
			log.Warn().Int("step", step).Str("dir", s.ck.Dir).Strs("state", s.names()).
				Msg("no checkpoint of this trainer's own state at or before the job's step: that state starts from its initial values")
		}
		return -1, nil, nil
	}
	got, err := s.ck.RestoreOptional(at, s.vars, optional)
	if err != nil {
		return -1, nil, err
	}
	ev := log.Info().Int64("checkpoint", at).Str("dir", s.ck.Dir).Strs("state", s.names())
	if at != int64(step) {
		ev = ev.Int("job_step", step)
	}
	ev.Msg("restored this trainer's own state")
	return at, got, nil
}

func (s *trainerState) names() []string {
	var out []string
	for name := range s.vars {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
