package dyntable

import (
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on x86-64 and on arm64
// with 4 KiB base pages.
const hugePage = 2 << 20

type slabMem struct {
	maps   [][]byte
	mapped int64
}

// alloc returns words zero words from a new mapping, 2 MiB-aligned and
// advised to be backed by huge pages; a Go allocation if mapping fails.
func (a *slabMem) alloc(words int) []uint64 {
	size := (words*8 + hugePage - 1) &^ (hugePage - 1)
	m, err := syscall.Mmap(-1, 0, size+hugePage, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return make([]uint64, words)
	}
	a.maps = append(a.maps, m)
	a.mapped += int64(size)
	base := uintptr(unsafe.Pointer(&m[0]))
	off := int((base+hugePage-1)&^(hugePage-1) - base)
	region := m[off : off+size]
	_ = syscall.Madvise(region, 14) // MADV_HUGEPAGE: a hint; ignored where huge pages are off
	return unsafe.Slice((*uint64)(unsafe.Pointer(&region[0])), words)
}

// release unmaps every slab; no slice of them may be used after.
func (a *slabMem) release() {
	for _, m := range a.maps {
		_ = syscall.Munmap(m)
	}
	a.maps, a.mapped = nil, 0
}
