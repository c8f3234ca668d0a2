package kernels

import (
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/tensor"
)

// slice_rows, pad_rows and concat copy row blocks along one axis.

func init() {
	register("slice_rows", func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		ax, _ := ops.RowAxis(x.Shape, k.Attrs.Int("axis"))
		outer, n, inner := split3(x.Shape, ax)
		s, e := k.Attrs.Int("start"), k.Attrs.Int("end")
		w := (e - s) * inner
		return func(Runtime) error {
			for o := 0; o < outer; o++ {
				copyElems(y, o*w, x, o*n*inner+s*inner, w)
			}
			return nil
		}, nil
	})
	register("pad_rows", func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		ax, _ := ops.RowAxis(x.Shape, k.Attrs.Int("axis"))
		outer, n, inner := split3(x.Shape, ax)
		s, size := k.Attrs.Int("start"), k.Attrs.Int("size")
		w := n * inner
		return func(Runtime) error {
			clear(y.F)
			for o := 0; o < outer; o++ {
				dst := o*size*inner + s*inner
				copy(y.F[dst:dst+w], x.F[o*w:(o+1)*w])
			}
			return nil
		}, nil
	})
	register("concat", func(k Args) (Kernel, error) {
		y := k.Out[0]
		ax, _ := ops.RowAxis(y.Shape, k.Attrs.Int("axis"))
		outer, total, inner := split3(y.Shape, ax)
		xs := k.In
		return func(Runtime) error {
			for o := 0; o < outer; o++ {
				dst := o * total * inner
				for _, x := range xs {
					w := x.Shape[ax] * inner
					copyElems(y, dst, x, o*w, w)
					dst += w
				}
			}
			return nil
		}, nil
	})
}

func init() {
	register("stack", func(k Args) (Kernel, error) {
		y := k.Out[0]
		ax, _ := ops.StackAxis(k.In[0].Shape, k.Attrs.Int("axis"))
		outer, _, inner := split3(y.Shape, ax)
		xs := k.In
		n := len(xs)
		return func(Runtime) error {
			for i, x := range xs {
				for o := range outer {
					copyElems(y, (o*n+i)*inner, x, o*inner, inner)
				}
			}
			return nil
		}, nil
	})
	register("stack_grad", func(k Args) (Kernel, error) {
		dy, dx := k.In[0], k.Out[0]
		ax, _ := ops.RowAxis(dy.Shape, k.Attrs.Int("axis"))
		outer, n, inner := split3(dy.Shape, ax)
		i := k.Attrs.Int("index")
		return func(Runtime) error {
			for o := range outer {
				src := (o*n + i) * inner
				copy(dx.F[o*inner:(o+1)*inner], dy.F[src:src+inner])
			}
			return nil
		}, nil
	})
}

// split3 returns the element counts before, along and after axis.
func split3(s tensor.Shape, ax int) (outer, n, inner int) {
	outer, inner = 1, 1
	for _, d := range s[:ax] {
		outer *= d
	}
	for _, d := range s[ax+1:] {
		inner *= d
	}
	return outer, s[ax], inner
}
