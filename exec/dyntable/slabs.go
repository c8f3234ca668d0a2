package dyntable

// A large table's pages and index segments come from slabs (slabMem)
// rather than one Go allocation each. On Linux slabMem maps the slabs
// itself, 2 MiB-aligned, and asks for transparent huge pages (madvise
// MADV_HUGEPAGE) before any byte is touched: a table that grows by a
// thousand rows a step then takes one page fault per 2 MiB instead of one
// per 4 KiB (each costs microseconds, more in a virtual machine), and its
// random lookups miss the TLB far less. The mapped memory is zero, holds
// no pointers and is returned to the system when the table is collected
// (runtime.AddCleanup). Elsewhere, and if a mapping fails, a slab is an
// ordinary Go allocation. Nothing here changes a byte a table holds.

// Tables smaller than these use ordinary allocations: their first
// slabFrom pages and segFrom index segments.
const (
	slabFrom  = 8
	slabPages = 64
	segFrom   = 16
	slabSegs  = 256
)

// slab hands out n-word pieces of slabs of per pieces each.
type slab struct {
	a    *slabMem
	free []uint64
}

func (s *slab) take(n, per int) []uint64 {
	if len(s.free) < n {
		s.free = s.a.alloc(n * per)
	}
	p := s.free[:n:n]
	s.free = s.free[n:]
	return p
}

// bytes is the memory of the slabs mapped outside the Go heap (their
// 2 MiB-aligned part; 0 where none is mapped).
func (a *slabMem) bytes() int64 {
	if a == nil {
		return 0
	}
	return a.mapped
}
