package dyntable

import (
	"unsafe"

	"github.com/psgraph/psgraph/exec/blas"
)

// The rows live in pages of pageRows records each; a record is a row's
// slot, its number fixed for the row's life, so the index can be rebuilt
// or grown without moving a row, and a slot handed out by Lookup stays
// valid however the index changes. A record is, in 64-bit words:
//
//	word 0    the key
//	word 1    the row's meta: last-seen step (low 32 bits) and sightings
//	          (high 32 bits, saturating), or for an LFU table its priority
//	words 2.. dim floats of value, then the optimizer state's floats
//	          (padded to a whole word)
//
// A free record has meta freeMeta and holds in word 0 the next free slot
// (the free list threads through the records and costs no memory).
// Pages are never returned: freed slots are reused first. Pages hold no
// pointers, so the garbage collector never scans them.

const (
	pageBits = 10
	pageRows = 1 << pageBits
	pageMask = pageRows - 1
	// freeMeta marks a free record: no step and no LFU priority reaches it.
	freeMeta = ^uint64(0)
	// maxSlots bounds a table's slots: a slot is an int32.
	maxSlots = 1<<31 - pageRows
)

type rows struct {
	width  int // floats per row: dim + state
	stride int // words per record
	pages  [][]uint64
	slab   slab
	hw     int32 // slots [0, hw) were handed out at least once
	free   int32 // first free slot, -1 when none
	nfree  int32
}

func newRows(width int) rows {
	return rows{width: width, stride: 2 + (width+1)/2, free: -1}
}

func (r *rows) rec(slot int32) []uint64 {
	p := r.pages[slot>>pageBits]
	o := int(slot&pageMask) * r.stride
	return p[o : o+r.stride : o+r.stride]
}

func (r *rows) key(slot int32) int64 {
	return int64(r.pages[slot>>pageBits][int(slot&pageMask)*r.stride])
}

func (r *rows) meta(slot int32) uint64 {
	return r.pages[slot>>pageBits][int(slot&pageMask)*r.stride+1]
}

func (r *rows) setMeta(slot int32, m uint64) {
	r.pages[slot>>pageBits][int(slot&pageMask)*r.stride+1] = m
}

// floats is the row's value and state (dim + state floats), in place.
func (r *rows) floats(slot int32) []float32 {
	p := r.pages[slot>>pageBits]
	o := int(slot&pageMask)*r.stride + 2
	return floatsOf(p[o:o+r.stride-2], r.width)
}

// floatsOf views the first n float32s of words.
func floatsOf(words []uint64, n int) []float32 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&words[0])), n)
}

// alloc hands out a slot: the last freed one, else a new one (growing by
// a page when the last is full); ok is false when the table holds
// maxSlots slots.
func (r *rows) alloc() (slot int32, ok bool) {
	if r.free >= 0 {
		slot = r.free
		r.free = int32(r.key(slot))
		r.nfree--
		if r.free >= 0 {
			r.prefetch(r.free, r.stride*8)
		}
		return slot, true
	}
	if r.hw >= maxSlots {
		return 0, false
	}
	if int(r.hw>>pageBits) == len(r.pages) {
		r.pages = append(r.pages, r.slab.take(pageRows*r.stride))
	}
	r.hw++
	// The next new row's record is written soon: ask for its lines now.
	if int(r.hw>>pageBits) < len(r.pages) {
		r.prefetch(r.hw, r.stride*8)
	}
	return r.hw - 1, true
}

// release frees slot (the caller has taken its key out of the index).
func (r *rows) release(slot int32) {
	rec := r.rec(slot)
	rec[0], rec[1] = uint64(int64(r.free)), freeMeta
	r.free = slot
	r.nfree++
}

// held is the number of slots holding a row, live or awaiting reclaim.
func (r *rows) held() int { return int(r.hw - r.nfree) }

// bytes is the memory of the pages.
func (r *rows) bytes() int64 { return int64(len(r.pages)) * pageRows * int64(r.stride) * 8 }

// prefetch asks for the cache lines of slot's record's first n bytes.
func (r *rows) prefetch(slot int32, n int) {
	p := r.pages[slot>>pageBits]
	a := uintptr(unsafe.Pointer(unsafe.SliceData(p))) + uintptr(int(slot&pageMask)*r.stride*8)
	end := a + uintptr(n) - 1
	for ; a <= end|63; a += 64 {
		blas.Prefetch(a)
	}
}
