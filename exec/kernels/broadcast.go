package kernels

import (
	"github.com/psgraph/psgraph/exec/tensor"
)

// Broadcasting at run time; the shape rule is ops.BroadcastShape.

// bcastStrides returns, for each dim of out, the stride of x along it (0
// where x is broadcast).
func bcastStrides(x, out tensor.Shape) []int {
	st := make([]int, len(out))
	s := 1
	for i := len(out) - 1; i >= 0; i-- {
		j := len(x) - len(out) + i
		if j >= 0 && x[j] != 1 {
			st[i] = s
		}
		if j >= 0 {
			s *= x[j]
		}
	}
	return st
}

// bcastPlan classifies how x maps onto out, so kernels take a fast path.
type bcastKind uint8

const (
	bcSame   bcastKind = iota // x has out's shape
	bcScalar                  // x has one element
	bcSuffix                  // x's shape is a trailing suffix of out's: repeats every len(x)
	bcGeneral
)

func classify(x, out tensor.Shape) bcastKind {
	xs := x.Numel()
	switch {
	case xs == out.Numel() && x.Numel() == out.Numel() && shapeSuffixEq(x, out):
		return bcSame
	case xs == 1:
		return bcScalar
	}
	// strip leading ones
	i := 0
	for i < len(x) && x[i] == 1 {
		i++
	}
	if shapeSuffixEq(x[i:], out) {
		return bcSuffix
	}
	return bcGeneral
}

func shapeSuffixEq(x, out tensor.Shape) bool {
	if len(x) > len(out) {
		return false
	}
	off := len(out) - len(x)
	for i := range x {
		if x[i] != out[off+i] {
			return false
		}
	}
	return true
}

// indexer walks the flat indices of two broadcast operands in out order.
type indexer struct {
	out      tensor.Shape
	sa, sb   []int
	idx      []int
	ia, ib   int
	finished bool
}

func newIndexer(a, b, out tensor.Shape) *indexer {
	return &indexer{out: out, sa: bcastStrides(a, out), sb: bcastStrides(b, out), idx: make([]int, len(out))}
}

func (it *indexer) reset() {
	for i := range it.idx {
		it.idx[i] = 0
	}
	it.ia, it.ib = 0, 0
}

// next advances to the next output element.
func (it *indexer) next() {
	for d := len(it.out) - 1; d >= 0; d-- {
		it.idx[d]++
		it.ia += it.sa[d]
		it.ib += it.sb[d]
		if it.idx[d] < it.out[d] {
			return
		}
		it.ia -= it.sa[d] * it.out[d]
		it.ib -= it.sb[d] * it.out[d]
		it.idx[d] = 0
	}
}
