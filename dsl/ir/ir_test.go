package ir

import (
	"math"
	"testing"
)

// The numbering of DType is part of the wire format: a frame carries it.
func TestDTypeWireNumbers(t *testing.T) {
	for _, c := range []struct {
		d    DType
		n    uint8
		name string
	}{{Invalid, 0, "dtype(0)"}, {F32, 1, "float32"}, {I32, 2, "int32"}, {Rows, 3, "rows"}, {I64, 4, "int64"}} {
		if uint8(c.d) != c.n || c.d.String() != c.name {
			t.Errorf("%v is %d, want %d (%s)", c.d, uint8(c.d), c.n, c.name)
		}
		if c.d == Invalid || c.d == Rows {
			continue
		}
		if got, ok := ParseDType(c.name); !ok || got != c.d {
			t.Errorf("ParseDType(%q) = %v, %v", c.name, got, ok)
		}
	}
	if _, ok := ParseDType("float64"); ok {
		t.Error("ParseDType accepted float64")
	}
	if got, ok := ParseDType("i64"); !ok || got != I64 {
		t.Errorf("ParseDType(i64) = %v, %v", got, ok)
	}
	for d, size := range map[DType]int{F32: 4, I32: 4, I64: 8} {
		if d.Size() != size {
			t.Errorf("%v.Size() = %d, want %d", d, d.Size(), size)
		}
	}
}

func TestShape(t *testing.T) {
	s := Shape{2, 3}
	if s.Numel() != 6 || (Shape{}).Numel() != 1 {
		t.Errorf("Numel: %d, %d", s.Numel(), (Shape{}).Numel())
	}
	c := s.Clone()
	c[0] = 5
	if s[0] != 2 || s.Equal(c) || !s.Equal(Shape{2, 3}) {
		t.Error("Clone shares memory or Equal is wrong")
	}
	if got := (Shape{-1, 4}).String(); got != "[batch, 4]" {
		t.Errorf("String = %q", got)
	}
}

// A hash is its own bits as a key, except 2^63, the padding key's bits.
func TestHashKeyNeverPads(t *testing.T) {
	for h, want := range map[uint64]int64{0: 0, 1: 1, 1<<63 - 1: math.MaxInt64, 1 << 63: math.MinInt64 + 1, 1<<63 + 1: math.MinInt64 + 1, 1<<64 - 1: -1} {
		if got := HashKey(h); got != want {
			t.Errorf("HashKey(%#x) = %d, want %d", h, got, want)
		}
	}
	if PadKey != math.MinInt64 {
		t.Errorf("PadKey = %d", PadKey)
	}
}
