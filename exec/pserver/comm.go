package pserver

import (
	"context"

	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/transport"
)

// Comm is a pserver's communication as Serve uses it: the job around the
// steps (its trainers, their start and end, a lost trainer waited for), a
// rendezvous per part of the graph, and the table pulls of trainer 0's
// evaluation and of a saved model. comm.PServer implements it over any
// transport.Endpoint: TCP in a job, the in-memory transport.Hub in the
// job tests (exec/job), which run every pserver on it.
type Comm interface {
	Trainers() int
	Async() bool
	Endpoint() transport.Endpoint
	Traffic() transport.Traffic
	// StartServing sends the trainers the parameters of the first step
	// and returns that step (restored: the checkpoint's, -1 for none).
	StartServing(ctx context.Context, params []comm.Initial, restored int64) (int64, error)
	// Part is the rendezvous of one part of the pserver's graph, which
	// serves params from step first.
	Part(params []comm.Initial, first int64) *comm.Part
	// Flush waits until what was sent was written.
	Flush(ctx context.Context) error
	// Finish tells the trainers this pserver is done.
	Finish(ctx context.Context) error
	// RideOut waits for a trainer lost with err to come back (nil), or
	// returns the error that ends the job.
	RideOut(ctx context.Context, err error) error
	// Watched is a child of ctx cancelled when a trainer comes back as a
	// new process, with that restart's context.
	Watched(ctx context.Context) (w, restarted context.Context)
	// StopJob tells every trainer this pserver stops the job because of
	// err, and returns err.
	StopJob(err error) error
	// RecvPull and ReplyPull take a trainer's pull of a table's rows and
	// answer it.
	RecvPull(ctx context.Context, table string, buf []byte) (transport.Key, []byte, error)
	ReplyPull(ctx context.Context, k transport.Key, table string, rows []float32) error
	// AwaitOthers waits until the other trainers of a sync job are as far
	// as trainer who.
	AwaitOthers(ctx context.Context, who int) error
}

var _ Comm = (*comm.PServer)(nil)
