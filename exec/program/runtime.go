package program

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/blas"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/tensor"
)

// Comm is the communication a node's send, recv and accumulate ops use.
// The distributed runtime implements it over a transport; a local run has none.
type Comm interface {
	Send(ctx context.Context, step int64, attrs ops.Attrs, t *tensor.Tensor) error
	Recv(ctx context.Context, step int64, attrs ops.Attrs, t *tensor.Tensor) error
	Accumulate(ctx context.Context, step int64, attrs ops.Attrs, n int, t *tensor.Tensor) error
	// Flush waits until the tensors handed to Send were written, so their
	// memory may change again; the loops call it before every step.
	Flush(ctx context.Context) error
	// Finish tells every peer that this node sends nothing more.
	Finish(ctx context.Context) error
	// AwaitPeers waits until every peer finished too (errors: peers lost).
	AwaitPeers(ctx context.Context) []error
	// StopJob tells every peer this node stops the job because of err,
	// and returns err.
	StopJob(err error) error
	// SendBytes, RecvBytes and RecvAnyBytes move payloads of varying
	// length (a sharded table's ids, rows and row gradients; kernels.Runtime).
	SendBytes(ctx context.Context, step int64, peer ir.Node, v string, wt ir.DType, payload []byte) error
	RecvBytes(ctx context.Context, step int64, peer ir.Node, v string, dst []byte) (int, error)
	RecvAnyBytes(ctx context.Context, v string, dst []byte) (n, trainer int, step int64, err error)
	// Pending waits until one of the transfers vs has a message from any
	// trainer (kernels.Runtime).
	Pending(ctx context.Context, vs []string) (string, error)
}

// NodeRuntime is the kernels.Runtime of one node: the step being run, the
// node's queues and its communication.
type NodeRuntime struct {
	Ctx          context.Context
	StepNum      int64
	Comm         Comm
	TrainerIndex int
	TrainerCount int
	// AsyncJob: the node is part of an async job (kernels.Runtime.Async).
	AsyncJob bool

	mu     sync.Mutex
	queues map[string]*queue
}

var errNoComm = errors.New("this op moves tensors between nodes; run the placed files from `psgraph split` with --role trainer/pserver")

func (r *NodeRuntime) Context() context.Context { return r.Ctx }
func (r *NodeRuntime) Step() int64              { return r.StepNum }
func (r *NodeRuntime) Trainer() (int, int)      { return r.TrainerIndex, max(r.TrainerCount, 1) }

func (r *NodeRuntime) Send(a ops.Attrs, t *tensor.Tensor) error {
	if r.Comm == nil {
		return errNoComm
	}
	return r.Comm.Send(r.Ctx, r.StepNum, a, t)
}

func (r *NodeRuntime) Recv(a ops.Attrs, t *tensor.Tensor) error {
	if r.Comm == nil {
		return errNoComm
	}
	return r.Comm.Recv(r.Ctx, r.StepNum, a, t)
}

func (r *NodeRuntime) Accumulate(a ops.Attrs, n int, t *tensor.Tensor) error {
	if r.Comm == nil {
		return errNoComm
	}
	return r.Comm.Accumulate(r.Ctx, r.StepNum, a, n, t)
}

func (r *NodeRuntime) SendBytes(p ir.Node, step int64, v string, wt ir.DType, payload []byte) error {
	if r.Comm == nil {
		return errNoComm
	}
	return r.Comm.SendBytes(r.Ctx, step, p, v, wt, payload)
}

func (r *NodeRuntime) RecvBytes(p ir.Node, v string, dst []byte) (int, error) {
	if r.Comm == nil {
		return 0, errNoComm
	}
	return r.Comm.RecvBytes(r.Ctx, r.StepNum, p, v, dst)
}

func (r *NodeRuntime) RecvAnyBytes(v string, dst []byte) (int, int, int64, error) {
	if r.Comm == nil {
		return 0, 0, 0, errNoComm
	}
	return r.Comm.RecvAnyBytes(r.Ctx, v, dst)
}

func (r *NodeRuntime) Pending(vs []string) (string, error) {
	if r.Comm == nil {
		return "", errNoComm
	}
	return r.Comm.Pending(r.Ctx, vs)
}

func (r *NodeRuntime) Async() bool { return r.AsyncJob }

// Queue returns the node-local bounded queue of that name.
func (r *NodeRuntime) Queue(name string, capacity int) kernels.Queue {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.queues == nil {
		r.queues = map[string]*queue{}
	}
	q, ok := r.queues[name]
	if !ok {
		q = &queue{cap: max(capacity, 1), items: make(chan *tensor.Tensor, max(capacity, 1))}
		r.queues[name] = q
	}
	return q
}

// queue is a bounded FIFO of tensor copies; buffers are recycled.
type queue struct {
	cap   int
	items chan *tensor.Tensor
	free  sync.Pool
}

func (q *queue) Enqueue(ctx context.Context, t *tensor.Tensor) error {
	c, _ := q.free.Get().(*tensor.Tensor)
	if c == nil || c.Numel() != t.Numel() || c.DType != t.DType {
		c = tensor.New(t.DType, t.Shape)
	}
	c.CopyFrom(t)
	select {
	case q.items <- c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (q *queue) Dequeue(ctx context.Context, min int, out *tensor.Tensor) error {
	if min > q.cap {
		return fmt.Errorf("dequeue of %d items from a queue of capacity %d would block forever", min, q.cap)
	}
	clear(out.F)
	for i := 0; i < min; i++ {
		select {
		case c := <-q.items:
			blas.Add(out.F, c.F, out.F)
			q.free.Put(c)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	blas.Scale(1/float32(min), 0, out.F, out.F)
	return nil
}
