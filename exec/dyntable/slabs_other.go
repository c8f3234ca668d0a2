//go:build !linux

package dyntable

// slabMem allocates on the Go heap here (mapped stays 0: the heap counts it).
type slabMem struct{ mapped int64 }

func (a *slabMem) alloc(words int) []uint64 {
	return make([]uint64, words)
}

func (a *slabMem) release() {}
