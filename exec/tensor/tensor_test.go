package tensor

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"
)

// An int64 tensor keeps its values in L, and Bytes is their little-endian
// encoding, 8 bytes each, without copying: what the transport writes and
// safetensors stores as I64.
func TestInt64Storage(t *testing.T) {
	x := New(I64, Shape{2, 3})
	if len(x.L) != 6 || x.F != nil || x.I != nil || x.DType.Size() != 8 {
		t.Fatalf("New(I64): L %d, F %v, I %v", len(x.L), x.F, x.I)
	}
	vals := []int64{0, -1, math.MinInt64, math.MaxInt64, 1 << 40, -(1 << 33) + 7}
	copy(x.L, vals)
	b := x.Bytes()
	if len(b) != 48 {
		t.Fatalf("Bytes: %d bytes, want 48", len(b))
	}
	for i, v := range vals {
		if got := int64(binary.LittleEndian.Uint64(b[8*i:])); got != v {
			t.Errorf("element %d encodes %d, want %d", i, got, v)
		}
	}
	b[0] = 5 // a view, not a copy
	if x.L[0] != 5 {
		t.Errorf("Bytes is not a view of L: L[0] = %d", x.L[0])
	}
	y := New(I64, Shape{6})
	y.CopyFrom(x)
	if !slices.Equal(y.L, x.L) {
		t.Errorf("CopyFrom: %v, want %v", y.L, x.L)
	}
	z := New(I64, Shape{6})
	SwapData(y, z)
	if !slices.Equal(z.L, x.L) || slices.ContainsFunc(y.L, func(v int64) bool { return v != 0 }) {
		t.Errorf("SwapData: %v and %v", y.L, z.L)
	}
	if n := testing.AllocsPerRun(100, func() { _ = x.Bytes(); y.CopyFrom(x) }); n != 0 {
		t.Errorf("Bytes and CopyFrom allocate %v times", n)
	}
}
