package blas

import (
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on amd64 and arm64 Linux.
const hugePage = 2 << 20

// AdviseHuge asks the kernel to back the whole 2 MiB pages inside a large
// allocation with transparent huge pages (madvise MADV_HUGEPAGE; a no-op
// where THP is off). A table of millions of rows is read at random rows:
// with 4 KiB pages nearly every row read misses the TLB too, and first
// touching the table faults 512 times as often.
func AdviseHuge(p unsafe.Pointer, bytes uintptr) {
	lo := (uintptr(p) + hugePage - 1) &^ (hugePage - 1)
	hi := (uintptr(p) + bytes) &^ (hugePage - 1)
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(unsafe.Slice((*byte)(unsafe.Add(p, lo-uintptr(p))), hi-lo), 14 /* MADV_HUGEPAGE */)
}
