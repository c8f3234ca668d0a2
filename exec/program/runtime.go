package program

import (
	"context"
	"fmt"
	"sync"

	"github.com/psgraph/psgraph/exec/blas"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/tensor"
)

// Runtime is the kernels.Runtime of one node: the step being run, the
// node's communication and its queues. A loop keeps one and sets StepNum
// before each Run.
type Runtime struct {
	Ctx     context.Context
	StepNum int64
	// RV is a trainer's communication, PS a pserver's (both nil outside
	// a job).
	RV kernels.Rendezvous
	PS kernels.ServerRendezvous
	// Tables is held around every read of a table's rows
	// (kernels.Runtime.TableReads; nil: none).
	Tables sync.Locker
	// SerialKernels keeps the kernels on the calling goroutine
	// (kernels.Runtime.Serial): set by a caller running about as many
	// programs at once as there are cores.
	SerialKernels bool

	mu     sync.Mutex
	queues map[string]*queue
}

func (r *Runtime) Context() context.Context { return r.Ctx }
func (r *Runtime) Step() int64              { return r.StepNum }

// Rendezvous is the node's communication, a trainer's or a pserver's.
func (r *Runtime) Rendezvous() kernels.Rendezvous {
	if r.PS != nil {
		return r.PS
	}
	return r.RV
}

// TableReads is held around every read of a table's rows (nil: none).
func (r *Runtime) TableReads() sync.Locker { return r.Tables }

// Serial reports whether the kernels compute on the calling goroutine only.
func (r *Runtime) Serial() bool { return r.SerialKernels }

// Server is a pserver's communication.
func (r *Runtime) Server() kernels.ServerRendezvous { return r.PS }

// Queue returns the node-local bounded queue of that name.
func (r *Runtime) Queue(name string, capacity int) kernels.Queue {
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
