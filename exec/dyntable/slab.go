package dyntable

import (
	"unsafe"

	"github.com/psgraph/psgraph/exec/blas"
)

// A large table's record pages and index segments are carved from slabs
// of slabBytes, each one Go allocation whose whole 2 MiB pages are
// advised for transparent huge pages (blas.AdviseHuge: madvise
// MADV_HUGEPAGE on Linux, nothing elsewhere) before their first touch (a
// fixed table's tensor is advised after it, tensor.AdviseHuge). A table
// of millions of rows is read at random records: on 4 KiB pages nearly
// every record read also misses the TLB, and its page walk misses the
// cache. The first slabAfter pieces of a table are
// ordinary allocations, so a small table costs no slab. The slabs being
// carved hold at most slabBytes each of memory not yet used (on the Go
// heap; not resident while untouched, when the heap took it fresh from
// the system): BenchmarkLookup's heap per row of a 2M-row table is 162.3
// bytes, against 161.2 without slabs.

const (
	slabBytes = 8 << 20
	slabAfter = 8
)

// slab hands out pieces of one size.
type slab struct {
	n    int // pieces handed out
	free []uint64
}

// take returns a zero piece of words words.
func (s *slab) take(words int) []uint64 {
	s.n++
	if s.n <= slabAfter || words*8 > slabBytes/4 {
		return make([]uint64, words)
	}
	if len(s.free) < words {
		per := slabBytes / (words * 8)
		s.free = make([]uint64, per*words)
		blas.AdviseHuge(unsafe.Pointer(unsafe.SliceData(s.free)), uintptr(len(s.free)*8))
	}
	p := s.free[:words:words]
	s.free = s.free[words:]
	return p
}
