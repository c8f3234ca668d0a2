package kernels

import (
	"context"
	"fmt"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/blas"
	"github.com/psgraph/psgraph/exec/tensor"
)

// Communication and queue ops: their kernels only call the Runtime, so the
// same op runs over TCP, over the in-memory transport in tests, or fails
// clearly in a local run.

func init() {
	register("send", sendKernel)
	register("recv", recvKernel)
	register("accumulate", accumulateKernel)
	register("enqueue", func(k Args) (Kernel, error) {
		x, name, c := k.In[0], k.Attrs.String("queue"), k.Attrs.Int("capacity")
		return func(rt Runtime) error { return rt.Queue(name, c).Enqueue(rt.Context(), x) }, nil
	})
	register("dequeue", func(k Args) (Kernel, error) {
		y, name, c, m := k.Out[0], k.Attrs.String("queue"), k.Attrs.Int("capacity"), k.Attrs.Int("min_count")
		return func(rt Runtime) error { return rt.Queue(name, c).Dequeue(rt.Context(), m, y) }, nil
	})
}

func sendKernel(k Args) (Kernel, error) {
	x, v := k.In[0], k.Attrs.String("var")
	to, err := ir.ParseAttr(k.Attrs.String("to"))
	if err != nil {
		return nil, err
	}
	offset, replyTo := int64(k.Attrs.Int("step_offset")), k.Attrs.String("reply_to")
	if to.Index < 0 && k.Node.Async && replyTo != "" {
		if k.Node.Role != ir.PServerRole {
			return nil, fmt.Errorf("send %s replies to the trainer of %s, which a pserver does; this graph is run as a %s", v, replyTo, k.Node.Role)
		}
		return func(rt Runtime) error {
			return rt.Server().Reply(rt.Context(), offset, replyTo, v, x.DType, x.Bytes())
		}, nil
	}
	return func(rt Runtime) error {
		return rt.Rendezvous().Send(rt.Context(), rt.Step()+offset, to, v, x.DType, x.Bytes())
	}, nil
}

func recvKernel(k Args) (Kernel, error) {
	y, v := k.Out[0], k.Attrs.String("var")
	from, err := ir.ParseAttr(k.Attrs.String("from"))
	if err != nil {
		return nil, err
	}
	if from.Index < 0 {
		return nil, fmt.Errorf("recv %s: from must name one node", v)
	}
	return func(rt Runtime) error {
		dst := y.Bytes()
		n, err := rt.Rendezvous().Recv(rt.Context(), rt.Step(), from, v, dst)
		if err == nil && n != len(dst) {
			return fmt.Errorf("%s sent %d bytes of %s, not %d; the nodes run different plans: use one split for the whole job", from, n, v, len(dst))
		}
		return err
	}, nil
}

// accumulateKernel gathers count pieces of a transfer and writes their
// mean (Mean).
func accumulateKernel(k Args) (Kernel, error) {
	y, v, n := k.Out[0], k.Attrs.String("var"), k.Attrs.Int("count")
	if y.DType != tensor.F32 {
		return nil, fmt.Errorf("accumulate averages float32 tensors, got %v", y.DType)
	}
	var scratch []float32
	if n > 1 {
		scratch = make([]float32, len(y.F))
	}
	ordered := n == k.Node.TrainerCount() && !k.Node.Async
	return func(rt Runtime) error {
		return Mean(rt.Context(), rt.Server(), rt.Step(), v, n, ordered, y.F, scratch)
	}, nil
}

// Mean receives n pieces of transfer v into y and leaves their mean there
// (scratch: a buffer of y's length when n > 1). Ordered, one piece comes
// from each trainer for step and they are summed in trainer order, so the
// result is deterministic; otherwise (async, or a min_count below the
// trainers') the first n pieces to arrive from anyone are taken.
func Mean(ctx context.Context, rv ServerRendezvous, step int64, v string, n int, ordered bool, y, scratch []float32) error {
	for i := range n {
		into := scratch
		if i == 0 {
			into = y
		}
		var err error
		if ordered {
			_, err = rv.Recv(ctx, step, ir.Trainer(i), v, f32Bytes(into))
		} else {
			_, _, _, err = rv.RecvAny(ctx, v, f32Bytes(into))
		}
		if err != nil {
			return err
		}
		if i > 0 {
			blas.Add(y, scratch, y)
		}
	}
	if n > 1 {
		blas.Scale(1/float32(n), 0, y, y)
	}
	return nil
}
