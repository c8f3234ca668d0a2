// Package kernels holds the kernel of every op of the catalog (dsl/ops) and
// the contracts between kernels and the node running them: Runtime (a
// step's context and number, the node's queues), Rendezvous (how
// communication kernels meet the node's peers) and Node (the node's place
// in its job, known when kernels are built). The catalog says what an op is (signature, shape
// rule, gradient rule, the properties the converter needs); this package
// says how it runs on concrete tensors. Kernels are registered by op name,
// one file per op file of the catalog (dsl/ops/op_unary.go holds the rules
// whose kernels are in op_unary.go here), and the executor builds them with
// Build. Registration happens at init and the registry is never mutated
// after.
package kernels

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/tensor"
)

// Runtime is what a kernel sees of the step it runs in. Pure compute
// kernels ignore it.
type Runtime interface {
	Context() context.Context
	Step() int64
	// Rendezvous is the node's communication in a job (nil outside one,
	// where no kernel of a communication op is built: checkRole).
	Rendezvous() Rendezvous
	// Server is a pserver's communication (nil on any other node, where
	// no kernel of a pserver's op is built: checkRole).
	Server() ServerRendezvous
	// Queue returns the node-local queue of that name.
	Queue(name string, capacity int) Queue
	// TableReads is held around every read of a table's rows in a
	// forward pass (lookup_table and embedding_bag of a table, dyn_pull of
	// a dynamic table in inference) when the tables are written in place
	// while programs run (a server following a job); nil: none is.
	TableReads() sync.Locker
	// Serial is set when the caller runs about as many programs at once
	// as there are cores (a server's concurrent requests): a kernel then
	// computes on the calling goroutine only (matmul: blas.SgemmSerial),
	// with the same result.
	Serial() bool
}

// Rendezvous is where communication kernels meet the node's peers, in the
// manner of TensorFlow's: a kernel sends and receives by transfer (its
// name) and peer; how a peer that was lost is waited for, and a restarted
// one brought up to date, is the node's business (package comm), not the
// kernel's. Trainers and pservers both have these two calls.
type Rendezvous interface {
	// Send hands payload to transfer v's peer `to` (Index -1: every
	// trainer) for step. It must not block on the network; payload must
	// not change before the node's next step.
	Send(ctx context.Context, step int64, to ir.Node, v string, dt ir.DType, payload []byte) error
	// Recv blocks until transfer v of step from peer `from` arrived,
	// reads it into the front of dst and returns its length.
	Recv(ctx context.Context, step int64, from ir.Node, v string, dst []byte) (int, error)
}

// ServerRendezvous is a pserver's rendezvous: besides sending to and
// receiving from one peer, it takes a transfer from whichever trainer
// sent it first and answers that trainer, as an async pserver, or a piece
// count below the trainers', does. A trainer has none: the kernel of a
// pserver's op is not built on a trainer (its catalog entry says
// which role runs it: ops.Def.On), so a graph wired to
// the wrong role fails when it is compiled.
type ServerRendezvous interface {
	Rendezvous
	// Reply sends payload under transfer v to the trainer whose piece of
	// transfer replyTo was received last (RecvAny), for that piece's step
	// plus offset: an async pserver answers whoever sent the gradient.
	Reply(ctx context.Context, offset int64, replyTo, v string, dt ir.DType, payload []byte) error
	// RecvAny blocks until transfer v arrived from any trainer (an async
	// pserver, or a piece count below the trainers'), reads it into the
	// front of dst and returns its length, its trainer and its step.
	RecvAny(ctx context.Context, v string, dst []byte) (n int, from ir.Node, step int64, err error)
	// Pending blocks until a message of one of the transfers vs arrived
	// from any trainer and returns the name of the first of vs with one,
	// leaving it for a receive: an async pserver serves a table's rows
	// while it waits for a row gradient.
	Pending(ctx context.Context, vs []string) (string, error)
}

// checkRole fails for a transfer op (ops.Def.Transfer) built for a node
// it does not run on (ops.Def.On): outside a job, or on the other role.
func checkRole(op string, n Node) error {
	def, _ := ops.Lookup(op)
	on := def.On
	switch {
	case !def.Transfer:
		return nil
	case n.Role == ir.NoRole:
		return errors.New("this op moves tensors between nodes; run the placed files from `psgraph split` with --role trainer/pserver")
	case on != ir.NoRole && on != n.Role:
		return fmt.Errorf("this op runs on a %s, and this graph is run as a %s: run each placed file from `psgraph split` with its own --role", on, n.Role)
	}
	return nil
}

// Node is the node's place in its job, fixed when its kernels are built:
// its role (ir.NoRole: outside a job), its trainer index (a trainer's;
// dropout masks differ per trainer), the trainer count, and whether the
// job is async. The zero Node is a local run's: one trainer, sync.
type Node struct {
	Role     ir.Role
	Trainer  int
	Trainers int
	Async    bool
}

// TrainerCount is the job's trainer count (1 outside a job).
func (n Node) TrainerCount() int { return max(n.Trainers, 1) }

// Queue is a bounded FIFO of tensors owned by one node.
type Queue interface {
	Enqueue(ctx context.Context, t *tensor.Tensor) error
	// Dequeue blocks until min items are queued, removes them and writes their mean into out.
	Dequeue(ctx context.Context, min int, out *tensor.Tensor) error
}

// Kernel runs an op once. It reads and writes the tensors it was built for,
// through their pointers, on every run.
type Kernel func(rt Runtime) error

// Args is what a kernel constructor gets: the op's input and output
// tensors (allocated by the executor from the inferred types) and attributes.
type Args struct {
	In, Out []*tensor.Tensor
	Attrs   ops.Attrs
	// Inference is set when the program evaluates or predicts rather than
	// trains (program.CompileOptions.Targets): random ops such as dropout
	// are then the identity.
	Inference bool
	// Node is the node's place in its job.
	Node Node
	// Dynamic holds this program's dynamic tables by name (the dyn_* ops;
	// nil: none).
	Dynamic map[string]*Dynamic
}

// Builder builds an op's kernel for concrete tensors.
type Builder func(a Args) (Kernel, error)

var builders = map[string]Builder{}

func register(name string, b Builder) {
	if _, dup := builders[name]; dup {
		panic("kernels: duplicate kernel for op " + name)
	}
	builders[name] = b
}

// Build builds the kernel of op name for the tensors and attributes in a.
func Build(name string, a Args) (Kernel, error) {
	b, ok := builders[name]
	if !ok {
		return nil, fmt.Errorf("no kernel is registered for op %q", name)
	}
	if err := checkRole(name, a.Node); err != nil {
		return nil, err
	}
	return b(a)
}

// Split is a communication kernel cut in two, in the manner of
// TensorFlow's RecvAsync: Start computes and hands its requests to the
// rendezvous without blocking; Finish blocks until the peers' replies
// arrived and writes the outputs. Run one after the other they are the
// op's kernel. The executor runs every ready Start before any Finish, so
// the requests of all of a step's split ops travel together and their
// round trips overlap. A Finish waits on the peers only, never on another
// op of its node's step (the peers answer without hearing more from this
// node), so the executor may block on it on any goroutine.
type Split struct{ Start, Finish Kernel }

// SplitBuilder builds an op's kernel in two halves for concrete tensors.
type SplitBuilder func(a Args) (Split, error)

var splitBuilders = map[string]SplitBuilder{}

// registerSplit registers a kernel built in two halves; Build gives both
// run one after the other.
func registerSplit(name string, b SplitBuilder) {
	splitBuilders[name] = b
	register(name, func(a Args) (Kernel, error) {
		s, err := b(a)
		if err != nil {
			return nil, err
		}
		return func(rt Runtime) error {
			if err := s.Start(rt); err != nil {
				return err
			}
			return s.Finish(rt)
		}, nil
	})
}

// BuildSplit builds op name's kernel in its two halves; ok is false for an
// op whose kernel is not split (build it with Build).
func BuildSplit(name string, a Args) (s Split, ok bool, err error) {
	b, ok := splitBuilders[name]
	if !ok {
		return Split{}, false, nil
	}
	if err := checkRole(name, a.Node); err != nil {
		return Split{}, true, err
	}
	s, err = b(a)
	return s, true, err
}
