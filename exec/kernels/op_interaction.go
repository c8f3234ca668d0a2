package kernels

import (
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/blas"
)

// dot_interaction and its gradient, fused (dsl/ops/op_interaction.go).
// Both run the batch in chunks of rows: the chunk's products x[b] x[b]ᵀ
// (forward) or the symmetric G + Gᵀ of its output gradient (backward) go
// to a [chunk, F, F] scratch allocated at build time, small enough to
// stay in cache, and one batched GEMM per chunk computes them (forward)
// or dx = (G + Gᵀ) x (backward). The forward reads the pairs j < i of
// each product's rows, contiguous in its row i.

func init() {
	register("dot_interaction", func(k Args) (Kernel, error) {
		x, z := k.In[0], k.Out[0]
		in := newInteraction(x.Shape[0], x.Shape[1], x.Shape[2], k.Attrs.Bool("self"))
		return func(Runtime) error { in.forward(x.F, z.F); return nil }, nil
	})
	register("dot_interaction_grad", func(k Args) (Kernel, error) {
		dz, x, dx := k.In[0], k.In[1], k.Out[0]
		in := newInteraction(x.Shape[0], x.Shape[1], x.Shape[2], k.Attrs.Bool("self"))
		return func(Runtime) error { in.backward(dz.F, x.F, dx.F); return nil }, nil
	})
}

// interactionChunk is the rows of x one batched GEMM takes.
const interactionChunk = 16

type interaction struct {
	b, f, d, pairs int
	self           bool
	// scratch is [chunk, F, F]: the forward's products x[b] x[b]ᵀ, or the
	// backward's symmetric S
	scratch []float32
}

func newInteraction(b, f, d int, self bool) *interaction {
	return &interaction{b: b, f: f, d: d, pairs: ops.InteractionPairs(f, self), self: self,
		scratch: make([]float32, min(b, interactionChunk)*f*f)}
}

// lower is the number of pairs of row i of a product: j < i, or j <= i
// with self.
func (in *interaction) lower(i int) int {
	if in.self {
		return i + 1
	}
	return i
}

func (in *interaction) forward(x, z []float32) {
	f, d, ff, fd := in.f, in.d, in.f*in.f, in.f*in.d
	for b0 := 0; b0 < in.b; b0 += interactionChunk {
		c := min(interactionChunk, in.b-b0)
		xb := x[b0*fd:]
		blas.SgemmBatch(false, true, c, f, f, d, 1, xb, d, fd, xb, d, fd, 0, in.scratch, f, ff)
		for q := range c {
			zq, out := in.scratch[q*ff:(q+1)*ff], z[(b0+q)*in.pairs:(b0+q+1)*in.pairs]
			p := 0
			for i := range f {
				n := in.lower(i)
				src, dst := zq[i*f:i*f+n], out[p:p+n]
				for j := range src { // rows this short copy faster without memmove
					dst[j] = src[j]
				}
				p += n
			}
		}
	}
}

// backward computes dx = S x per row, S [F, F] the symmetric matrix of
// dz's pairs: S[i, j] = S[j, i] = dz at pair (i, j), and with self the
// diagonal twice dz at (i, i), as d(x_i · x_i) = 2 x_i. Row i of S up to
// the diagonal is dz's pairs of i, in order; the rest is their mirror.
func (in *interaction) backward(dz, x, dx []float32) {
	f, d, ff, fd := in.f, in.d, in.f*in.f, in.f*in.d
	for b0 := 0; b0 < in.b; b0 += interactionChunk {
		c := min(interactionChunk, in.b-b0)
		for q := range c {
			s, g := in.scratch[q*ff:(q+1)*ff], dz[(b0+q)*in.pairs:(b0+q+1)*in.pairs]
			p := 0
			for i := range f {
				row := s[i*f : (i+1)*f]
				n := in.lower(i)
				src, dst := g[p:p+n], row[:n]
				for j := range src {
					dst[j] = src[j]
				}
				p += n
				if in.self {
					row[i] *= 2
				} else {
					row[i] = 0
				}
				for j := range i {
					s[j*f+i] = row[j]
				}
			}
		}
		blas.SgemmBatch(false, false, c, f, d, f, 1, in.scratch, f, ff, x[b0*fd:], d, fd, 0, dx[b0*fd:], d, fd)
	}
}
