// Package ir holds the type names of psgraph's intermediate representation:
// the element type (DType) and the shape (Shape) of a variable. It is a
// leaf: the model language (dsl, dsl/ops), the splitter (partition) and the
// runtime (exec, whose exec/tensor re-exports these names as aliases) all
// import it, and it imports nothing of theirs.
package ir

import (
	"fmt"
	"math"
	"strings"
)

// DType is an element type. The numbering is part of the wire format
// (docs/wire.md), which also carries Rows, a payload that is not a
// tensor's: the one enum serves the graph, the tensors and the transport.
type DType uint8

const (
	Invalid DType = 0
	F32     DType = 1
	I32     DType = 2
	// Rows is a row-sparse payload on the wire: n little-endian int32 row
	// ids, then the n rows' float32 values. No variable has it.
	Rows DType = 3
	// I64 holds 64-bit feature keys (data.ids with key: hash64 or key:
	// int64, hash_cross with dtype: int64) and the keys of dynamic tables.
	I64 DType = 4
)

// PadKey is the int64 key that fills the empty slots of a multi-valued
// ids column read as 64-bit keys: math.MinInt64, a value no hashed key
// takes and an integer key may not be (docs/dsl.md, "64-bit keys"). Ops
// reading int64 keys skip it as int32 ids < 0 are skipped.
const PadKey int64 = math.MinInt64

// DynamicRows is the row count of a dynamic table's shape ([DynamicRows,
// dim]): unknown, as rows are created when keys are admitted and removed
// when they expire. Shape rules read only its dim; no tensor of that many
// rows is ever allocated (the rows live in an exec/dyntable.Table). It is
// large enough that no fixed table has it and small enough that its
// product with any row width fits an int.
const DynamicRows = 1 << 40

// HashKey is the int64 key of a 64-bit hash h: h's bits read as a
// two's-complement int64, except the one hash whose bits are PadKey's
// (2^63), which becomes PadKey+1, so that no hashed key is padding.
func HashKey(h uint64) int64 {
	if k := int64(h); k != PadKey {
		return k
	}
	return PadKey + 1
}

func (d DType) String() string {
	switch d {
	case F32:
		return "float32"
	case I32:
		return "int32"
	case Rows:
		return "rows"
	case I64:
		return "int64"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the size of one element in bytes.
func (d DType) Size() int {
	if d == I64 {
		return 8
	}
	return 4
}

// ParseDType maps a DSL dtype name to a DType.
func ParseDType(s string) (DType, bool) {
	switch s {
	case "float32", "f32":
		return F32, true
	case "int32", "i32":
		return I32, true
	case "int64", "i64":
		return I64, true
	}
	return Invalid, false
}

// Shape is a list of dimensions. A scalar has an empty shape.
type Shape []int

// Numel is the number of elements.
func (s Shape) Numel() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// Equal reports whether two shapes are identical.
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

// Clone returns a copy that does not share memory with s.
func (s Shape) Clone() Shape { return append(Shape{}, s...) }

func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		if d < 0 {
			parts[i] = "batch"
		} else if d == DynamicRows {
			parts[i] = "dynamic"
		} else {
			parts[i] = fmt.Sprint(d)
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
