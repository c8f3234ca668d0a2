package dyntable

import (
	"unsafe"

	"github.com/psgraph/psgraph/internal/safetensors"
)

// A table's files are safetensors (internal/safetensors), written piece
// by piece at their tensors' offsets into an io.WriterAt (an *os.File),
// so a table is written without ever being whole in memory.

// tensorOf is the header's description of a tensor.
func tensorOf(name, dtype string, shape ...int64) safetensors.Tensor {
	return safetensors.Tensor{Name: name, DType: dtype, Shape: shape}
}

// starts maps each tensor's name to where its data starts in a file of
// layout l.
func starts(tensors []safetensors.Tensor, l safetensors.Layout) map[string]int64 {
	at := make(map[string]int64, len(tensors))
	for i, t := range tensors {
		at[t.Name] = l.At[i]
	}
	return at
}

// Byte views of typed slices, without copying (little-endian hosts, as
// psgraph's wire and files assume).

func bytesOf[T int64 | uint64 | float32 | int32](x []T) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*int(unsafe.Sizeof(x[0])))
}
