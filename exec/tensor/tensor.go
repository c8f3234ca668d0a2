// Package tensor holds psgraph's dense tensor: a shape, a dtype and a flat,
// row-major buffer. Kernels read the buffer through the Tensor at run time
// (never a slice captured at compile time), so the executor can move the
// next step's values into a persistent variable by swapping buffers.
//
// DType and Shape are the IR's type names (dsl/ir), aliased here so that
// runtime code keeps naming them tensor.DType and tensor.Shape.
package tensor

import (
	"unsafe"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/blas"
)

// DType is an element type (ir.DType: the IR names it, the wire numbers it).
type DType = ir.DType

const (
	Invalid = ir.Invalid
	F32     = ir.F32
	I32     = ir.I32
	I64     = ir.I64
)

// Shape is a list of dimensions (ir.Shape). A scalar has an empty shape.
type Shape = ir.Shape

// Tensor is a dense row-major tensor. Exactly one of F, I and L is used,
// according to DType: F for float32, I for int32 ids, L for int64 keys.
//
// A row-sparse tensor (Rows != nil) holds only some rows of its Shape
// [height, ...]: row i of F is row Rows.IDs[i] of the dense value, so F
// holds len(Rows.IDs) rows. Its F keeps the capacity of the most rows a
// step holds; Fit sizes it to the step's rows.
type Tensor struct {
	DType DType
	Shape Shape
	F     []float32
	I     []int32
	L     []int64
	Rows  *RowSet
}

// RowSet is the row index that row-sparse tensors share: the op producing
// the rows sets IDs each step (at most cap(IDs) of them, each row once),
// and every tensor with the same rows refers to the same RowSet. Add and
// Slot map a row to its position through an index that the producer
// builds as it adds rows (open addressing over a power-of-two table at
// most half full, cleared in time proportional to the rows it held), so a
// step allocates nothing. A producer whose rows are the positions 0..n-1
// (a dynamic table's pulled rows) fills the set with Identity instead: row
// r is then at slot r and nothing is hashed, unless a later Add of a row
// past n builds the index.
type RowSet struct {
	IDs   []int32
	keys  []int32 // row + 1; 0 is empty
	slots []int32
	mask  uint32
	ident bool // IDs are 0..len(IDs)-1 and keys is empty
}

// NewSparse allocates a row-sparse float32 tensor of dense shape shape
// with room for maxRows rows, holding rows (none yet).
func NewSparse(shape Shape, maxRows int, rows *RowSet) *Tensor {
	t := &Tensor{DType: F32, Shape: shape.Clone(), Rows: rows}
	t.F = make([]float32, maxRows*t.RowWidth())[:0]
	return t
}

// NewRowSet returns a row index with room for maxRows rows.
func NewRowSet(maxRows int) *RowSet {
	n := 16
	for n < 2*maxRows {
		n *= 2
	}
	return &RowSet{IDs: make([]int32, 0, maxRows), keys: make([]int32, n), slots: make([]int32, n), mask: uint32(n - 1)}
}

// Reset empties the set.
func (s *RowSet) Reset() {
	if s.ident {
		s.ident, s.IDs = false, s.IDs[:0]
		return
	}
	if len(s.IDs) > len(s.keys)/8 {
		clear(s.keys)
	} else {
		// Last added first: linear probing then finds every key where it
		// was put (the table goes back through the states it came through).
		for i := len(s.IDs) - 1; i >= 0; i-- {
			s.keys[s.bucket(s.IDs[i])] = 0
		}
	}
	s.IDs = s.IDs[:0]
}

func (s *RowSet) bucket(r int32) uint32 {
	b := (uint32(r) * 0x9E3779B1) & s.mask
	for s.keys[b] != 0 && s.keys[b] != r+1 {
		b = (b + 1) & s.mask
	}
	return b
}

// Identity empties the set and fills it with rows 0..n-1, row r at slot
// r (n <= cap(IDs)), in time proportional to n and without hashing.
func (s *RowSet) Identity(n int) {
	s.Reset()
	s.IDs = s.IDs[:n]
	for i := range s.IDs {
		s.IDs[i] = int32(i)
	}
	s.ident = true
}

// index builds the hashed index of an identity set's rows, before an Add
// of a row it does not hold.
func (s *RowSet) index() {
	s.ident = false
	for i, r := range s.IDs {
		b := s.bucket(r)
		s.keys[b], s.slots[b] = r+1, int32(i)
	}
}

// Add returns the slot of row r, appending it to IDs if absent (fresh).
// The set must have room (at most cap(IDs) rows).
func (s *RowSet) Add(r int32) (slot int, fresh bool) {
	if s.ident {
		if r >= 0 && int(r) < len(s.IDs) {
			return int(r), false
		}
		s.index()
	}
	b := s.bucket(r)
	if s.keys[b] != 0 {
		return int(s.slots[b]), false
	}
	s.keys[b], s.slots[b] = r+1, int32(len(s.IDs))
	s.IDs = append(s.IDs, r)
	return len(s.IDs) - 1, true
}

// Slot returns the slot of row r, or -1 when the set does not hold it.
func (s *RowSet) Slot(r int32) int {
	if s.ident {
		if r >= 0 && int(r) < len(s.IDs) {
			return int(r)
		}
		return -1
	}
	if b := s.bucket(r); s.keys[b] != 0 {
		return int(s.slots[b])
	}
	return -1
}

// RowWidth is the number of elements in one row (dim 0) of t.
func (t *Tensor) RowWidth() int { return t.Shape[1:].Numel() }

// Fit sizes a row-sparse tensor's F to the rows its RowSet holds now.
func (t *Tensor) Fit() {
	t.F = t.F[:len(t.Rows.IDs)*t.RowWidth()]
}

// New allocates a zeroed tensor on the system's ordinary pages: a large
// one is given huge pages only once it was first written (AdviseHuge).
func New(dt DType, shape Shape) *Tensor {
	t := &Tensor{DType: dt, Shape: shape.Clone()}
	n := shape.Numel()
	switch dt {
	case I32:
		t.I = make([]int32, n)
	case I64:
		t.L = make([]int64, n)
	default:
		t.F = make([]float32, n)
	}
	return t
}

// AdviseHuge asks for transparent huge pages behind the values of a tensor
// of hugeTensor bytes or more (blas.AdviseHuge; nothing for a smaller
// one), to be called once they were first written or read. The pages
// already there stay small pages; the kernel's khugepaged merges them into
// huge pages in the background, a few MiB every few seconds, so a table
// read at random rows misses the TLB less as the job goes on. Asked for
// before the first touch instead, every 2 MiB of the table is a huge page
// at once, which cost 3-15x more to fault in where the host backs a
// virtual machine's memory as it is touched (a 640 MB table and its
// optimizer state: 20-40 s before the first step ends, docs/performance.md).
func (t *Tensor) AdviseHuge() {
	var p unsafe.Pointer
	var n int
	switch {
	case len(t.F) > 0:
		p, n = unsafe.Pointer(unsafe.SliceData(t.F)), len(t.F)*4
	case len(t.I) > 0:
		p, n = unsafe.Pointer(unsafe.SliceData(t.I)), len(t.I)*4
	case len(t.L) > 0:
		p, n = unsafe.Pointer(unsafe.SliceData(t.L)), len(t.L)*8
	}
	if n >= hugeTensor {
		blas.AdviseHuge(p, uintptr(n))
	}
}

// hugeTensor is the size from which AdviseHuge asks for huge pages.
const hugeTensor = 8 << 20

// Numel is the number of elements.
func (t *Tensor) Numel() int { return t.Shape.Numel() }

// Bytes returns the tensor's memory as bytes, without copying: the view the
// transport writes to and reads from the wire (little-endian hosts only).
func (t *Tensor) Bytes() []byte {
	switch {
	case t.DType == I32 && len(t.I) > 0:
		return unsafe.Slice((*byte)(unsafe.Pointer(&t.I[0])), 4*len(t.I))
	case t.DType == I64 && len(t.L) > 0:
		return unsafe.Slice((*byte)(unsafe.Pointer(&t.L[0])), 8*len(t.L))
	case len(t.F) > 0:
		return unsafe.Slice((*byte)(unsafe.Pointer(&t.F[0])), 4*len(t.F))
	}
	return nil
}

// SwapData exchanges the buffers of two tensors of the same dtype and shape.
func SwapData(a, b *Tensor) {
	a.F, b.F = b.F, a.F
	a.I, b.I = b.I, a.I
	a.L, b.L = b.L, a.L
}

// CopyFrom copies src's data into t; shapes must have the same element count.
func (t *Tensor) CopyFrom(src *Tensor) {
	switch t.DType {
	case I32:
		copy(t.I, src.I)
	case I64:
		copy(t.L, src.L)
	default:
		copy(t.F, src.F)
	}
}

// F32Bytes returns x's memory as bytes, without copying.
func F32Bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

// I64Bytes returns x's memory as bytes, without copying.
func I64Bytes(x []int64) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 8*len(x))
}

// F32View returns b's memory as float32s, without copying (len(b)/4 of them).
func F32View(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}
