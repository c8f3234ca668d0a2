package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/transport"
	"github.com/rs/zerolog"
)

// RunOptions configures a training run of one node.
type RunOptions struct {
	Role  string // "local", "trainer"
	Steps int    // 0: the model's train.steps
	Batch int    // 0: the model's train.batch
	// Transfers is a distributed trainer's transfer table at Batch
	// (dsl.Graph.Transfers), computed once for the job (job.Job.Transfers).
	Transfers []dsl.Transfer
	// InitFrom is a safetensors file of initial values: a local run's
	// parameters and state; a distributed trainer reads from it only the
	// persistent variables it holds (the model's own state, such as
	// batch_norm's running statistics; a parameter placed on the trainer),
	// the pservers serving the others.
	InitFrom string
	Save     string // safetensors file to write the final parameters to
	Metrics  string // JSON-lines file, one object per logged step
	LogEvery int    // log every N steps (0: about 10 lines per run)
	Log      zerolog.Logger

	TrainerIndex, TrainerCount int
	// Comm connects a trainer to its pservers (nil for a local run).
	Comm Comm
	// Params names the model's parameters a distributed trainer receives
	// after its last step, to save and evaluate them.
	Params []string
	// Checkpoint, for a local run, saves the parameters and optimizer state
	// every Every steps and resumes from the newest checkpoint. A
	// distributed trainer that holds persistent variables (the model's own
	// state, a parameter placed on it) saves them as node trainer-<index>
	// at the steps the pservers checkpoint, and a trainer starting at step
	// s > 0 restores them from its newest checkpoint at or before s
	// (trainerState).
	Checkpoint *modelfile.Checkpointer
	// StartStep is the step a distributed trainer starts at: the step its
	// pservers resumed from (0 for a fresh job); < 0: learn it from the
	// step of the first parameter message the pservers send (they send the
	// step they are at: 0, a restored checkpoint's, or a running job's to
	// a restarted trainer).
	StartStep int
	// PServerTimeout: how long a distributed trainer waits for a lost
	// pserver to come back, the same process or a restarted one, before
	// it fails (0: fail at once).
	PServerTimeout time.Duration
	// Prom, when set, counts the steps and their time for Prometheus
	// (--metrics-addr); RunTrainer also counts its traffic per pserver.
	Prom *metrics.Node
	// Clock is the clock of the progress lines of long phases (nil:
	// time.Now); tests inject one.
	Clock func() time.Time
	// FinalPass: whether the summary's loss and metrics are computed over
	// the whole training data after the last step, or are the mean of the
	// last 100 steps' batch values.
	FinalPass FinalPass
	// Stop, closed, asks the run to stop (SIGTERM, SIGINT). A local run of
	// an online source then finishes its step, checkpoints, saves and
	// returns its summary, and so does a trainer of a split job given a
	// Halt (at the step its job agrees on), while its context ending stops
	// it at once; any other run ends as if its context ended.
	Stop <-chan struct{}
	// Halt, for a trainer of a split job reading an online source, is its
	// part in the job's stop (comm.Halt): the job stops when any of its
	// nodes is asked to (Stop here, a signal elsewhere), its trainers at
	// one step in a sync job. nil: Stop stops this trainer alone, as it
	// would a local run.
	Halt Halt
	// Stdin is the standard input an online source csv: "-" reads (nil:
	// os.Stdin).
	Stdin io.Reader
	// State, for trainer 0 of a job that follows serving replicas, takes
	// the model's variables the trainer holds (batch_norm's running
	// statistics, a parameter placed on it), which no pserver has, after
	// every step and at the end (nil: none; state.go).
	State StateSink
}

// FinalPass says whether a run ends with a pass over its whole training
// data for its summary (--final-pass).
type FinalPass uint8

const (
	// FinalPassAuto passes over data held in memory, not over a streamed
	// file: reading a file of millions of rows again takes about as long
	// as a pass of training.
	FinalPassAuto FinalPass = iota
	FinalPassOn
	FinalPassOff
)

// Summary is the result of a run, printed as the last line of stdout.
type Summary struct {
	Role      string
	Steps     int
	Seconds   float64
	StepsPerS float64
	// What the node's endpoint moved in the job, read once its pservers
	// finished (transport.Traffic; 0 for a local run; docs/runtime.md).
	SentBytes, RecvBytes         int64
	WireSentBytes, WireRecvBytes int64
	Loss                         float64
	Metrics                      map[string]float64
	order                        []string
	// Eval holds eval_loss and eval_<metric> over the held-out data
	// (data.eval) with the final parameters, EvalRows its rows; nil when
	// the node did not evaluate.
	Eval     map[string]float64
	EvalRows int
	// Note says that the loss or a metric depends on the rows batched
	// together and an evaluation computed it at another batch than the
	// training batch (evaluate.BatchNote); "" otherwise.
	Note string
	// Tables is the state of the run's dynamic tables at its end (live
	// rows, admissions, evictions, bytes); nil without them.
	Tables []metrics.TableStats
	// Stream is what a run of an online source read (nil for others);
	// the loss and metrics are then its progressive validation's, over
	// its last data.metrics_window rows.
	Stream *StreamSummary
}

// MarshalJSON writes the fixed keys first, then the metrics in model order.
func (s *Summary) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, `{"role":%q,"steps":%d,"seconds":%s,"steps_per_s":%s,"sent_bytes":%d,"recv_bytes":%d,"wire_sent_bytes":%d,"wire_recv_bytes":%d,"loss":%s`,
		s.Role, s.Steps, evaluate.JSONNum(s.Seconds), evaluate.JSONNum(s.StepsPerS), s.SentBytes, s.RecvBytes, s.WireSentBytes, s.WireRecvBytes, evaluate.JSONNum(s.Loss))
	for _, m := range s.order {
		k, _ := json.Marshal(m)
		fmt.Fprintf(&b, ",%s:%s", k, evaluate.JSONNum(s.Metrics[m]))
	}
	if s.Eval != nil {
		fmt.Fprintf(&b, `,"eval_rows":%d,"eval_loss":%s`, s.EvalRows, evaluate.JSONNum(s.Eval["eval_loss"]))
		for _, m := range s.order {
			k, _ := json.Marshal("eval_" + m)
			fmt.Fprintf(&b, ",%s:%s", k, evaluate.JSONNum(s.Eval["eval_"+m]))
		}
	}
	if s.Note != "" {
		n, _ := json.Marshal(s.Note)
		fmt.Fprintf(&b, `,"note":%s`, n)
	}
	writeTables(&b, s.Tables)
	if s.Stream != nil {
		st, _ := json.Marshal(s.Stream)
		fmt.Fprintf(&b, `,"stream":%s`, st)
	}
	b.WriteString("}")
	return []byte(b.String()), nil
}

// Comm is a trainer's communication as its loop uses it: the rendezvous
// its kernels send and receive through, and the job's life around the
// steps (comm.Trainer implements it).
type Comm interface {
	kernels.Rendezvous
	// Flush waits until the messages handed to Send were written, so
	// their memory may change again; the loop calls it before every step.
	Flush(ctx context.Context) error
	// Finish tells every pserver this trainer sends nothing more.
	Finish(ctx context.Context) error
	// AwaitPeers waits until every pserver finished too (errors: lost).
	AwaitPeers(ctx context.Context) []error
	// StopJob tells every pserver this trainer stops the job because of
	// err, and returns err.
	StopJob(err error) error
	// LearnStep is the step a trainer that learns its start joins at.
	LearnStep(ctx context.Context) (int64, error)
	// Traffic is what the endpoint moved so far.
	Traffic() transport.Traffic
	// Pull receives rows of pserver shard's part of table (comm.Pull):
	// trainer 0 of a job with tables evaluates and saves through it.
	Pull(ctx context.Context, shard int, table string, r comm.Pull, dst []float32) error
}

// StepsOf is the number of steps a run trains: steps (--steps) when
// positive, else the model's train.steps, else train.epochs passes over
// the data set's rows by all trainers: ceil(epochs x rows / (batch x
// trainers)), so that every row is read epochs times and the last step
// may run into the next pass (TestEpochsSetSteps). rows is called only
// for epochs. An online source may have no last step (0: until it ends
// or the run is stopped).
func StepsOf(g *dsl.Graph, steps, batch, trainers int, rows func() (int64, error)) (int, error) {
	switch {
	case steps > 0:
		return steps, nil
	case g.Train.Steps > 0:
		return g.Train.Steps, nil
	case g.Data != nil && g.Data.IsOnline():
		return 0, nil
	case g.Train.Epochs <= 0:
		return 0, stepsMissing(g)
	}
	r, err := rows()
	if err != nil {
		return 0, err
	}
	per := int64(batch) * int64(max(trainers, 1))
	k := (int64(g.Train.Epochs)*r + per - 1) / per
	if k > math.MaxInt32 {
		return 0, dsl.Errorf(g.Train.Pos, "train.epochs %d over %d rows at %d rows per step is %d steps, too many; lower epochs or raise train.batch", g.Train.Epochs, r, per, k)
	}
	return int(k), nil
}

func stepsMissing(g *dsl.Graph) error {
	return dsl.Errorf(g.Train.Pos, "train.steps is not set; give train.steps or train.epochs in the model, or --steps")
}
