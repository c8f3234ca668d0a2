package kernels

import (
	"fmt"

	"github.com/psgraph/psgraph/exec/tensor"
)

// Communication and queue ops: their kernels only call the Runtime, so the
// same op runs over TCP, over the in-memory transport in tests, or fails
// clearly in a local run.

func init() {
	register("send", func(k Args) (Kernel, error) {
		x, a := k.In[0], k.Attrs
		return func(rt Runtime) error { return rt.Send(a, x) }, nil
	})
	register("recv", func(k Args) (Kernel, error) {
		y, a := k.Out[0], k.Attrs
		return func(rt Runtime) error { return rt.Recv(a, y) }, nil
	})
	register("accumulate", func(k Args) (Kernel, error) {
		y, a, n := k.Out[0], k.Attrs, k.Attrs.Int("count")
		if y.DType != tensor.F32 {
			return nil, fmt.Errorf("accumulate averages float32 tensors, got %v", y.DType)
		}
		return func(rt Runtime) error { return rt.Accumulate(a, n, y) }, nil
	})
	register("enqueue", func(k Args) (Kernel, error) {
		x, name, c := k.In[0], k.Attrs.String("queue"), k.Attrs.Int("capacity")
		return func(rt Runtime) error { return rt.Queue(name, c).Enqueue(rt.Context(), x) }, nil
	})
	register("dequeue", func(k Args) (Kernel, error) {
		y, name, c, m := k.Out[0], k.Attrs.String("queue"), k.Attrs.Int("capacity"), k.Attrs.Int("min_count")
		return func(rt Runtime) error { return rt.Queue(name, c).Dequeue(rt.Context(), m, y) }, nil
	})
}
