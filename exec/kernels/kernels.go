// Package kernels holds the kernel of every op of the catalog (dsl/ops) and
// the contracts between kernels and the node running them: Runtime, Queue,
// Peer and WireType. The catalog says what an op is (signature, shape
// rule, gradient rule, the properties the converter needs); this package
// says how it runs on concrete tensors. Kernels are registered by op name,
// one file per op file of the catalog (dsl/ops/op_unary.go holds the rules
// whose kernels are in op_unary.go here), and the executor builds them with
// Build. Registration happens at init and the registry is never mutated
// after.
package kernels

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/tensor"
)

// Runtime is what blocking and communication kernels need from the node
// executing them. Pure compute kernels ignore it.
type Runtime interface {
	Context() context.Context
	Step() int64
	// Send hands t to the transfer named by attrs (var, to); it must not block on the network.
	Send(attrs ops.Attrs, t *tensor.Tensor) error
	// Recv blocks until the transfer named by attrs (var, from) for this step arrived and fills t.
	Recv(attrs ops.Attrs, t *tensor.Tensor) error
	// Accumulate blocks until n pieces of var for this step arrived and writes their mean into t.
	Accumulate(attrs ops.Attrs, n int, t *tensor.Tensor) error
	// Queue returns the node-local queue of that name.
	Queue(name string, capacity int) Queue
	// Trainer returns this node's trainer index and the trainer count (0, 1 outside a job).
	Trainer() (index, count int)
	// SendBytes queues payload for peer under transfer v for this step: the
	// lists of ids and rows of a sharded table, whose length varies. It
	// must not block on the network; payload must not change before the
	// node's next step.
	// step is the step the message is keyed for (an async pserver answers
	// a request for the step it was sent for).
	SendBytes(peer ir.Node, step int64, v string, dt ir.DType, payload []byte) error
	// RecvBytes blocks until transfer v of this step from peer arrived,
	// reads it into the front of dst and returns its length.
	RecvBytes(peer ir.Node, v string, dst []byte) (int, error)
	// RecvAnyBytes blocks until transfer v arrived from any trainer (async
	// pservers), reads it into the front of dst and returns its length, the
	// trainer and the step it was sent for.
	RecvAnyBytes(v string, dst []byte) (n int, trainer int, step int64, err error)
	// Pending blocks until a message of one of the transfers vs arrived
	// from any trainer and returns the name of the first of vs with one,
	// leaving it for a receive: an async pserver serves a table's rows
	// while it waits for a row gradient.
	Pending(vs []string) (string, error)
	// Async reports whether the node is part of an async job: a pserver
	// takes each piece from whichever trainer sent it first, whatever the
	// trainer count.
	Async() bool
}

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
	// trains (exec.CompileOptions.Targets): random ops such as dropout are
	// then the identity.
	Inference bool
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

// Lookup returns the kernel constructor of the op named name.
func Lookup(name string) (Builder, bool) {
	b, ok := builders[name]
	return b, ok
}

// Build builds the kernel of op name for the tensors and attributes in a.
func Build(name string, a Args) (Kernel, error) {
	b, ok := builders[name]
	if !ok {
		return nil, fmt.Errorf("no kernel is registered for op %q", name)
	}
	return b(a)
}

// Names lists the ops that have a kernel, sorted.
func Names() []string { return slices.Sorted(maps.Keys(builders)) }
