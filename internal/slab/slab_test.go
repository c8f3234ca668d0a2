package slab

import (
	"slices"
	"testing"
)

// Slices handed out are zero, hold their own elements (appending to one
// leaves the next as it was) and span blocks when the first runs out.
func TestSlabSlicesAreSeparate(t *testing.T) {
	a := Sized[int](5)
	x := a.Take(3)
	y := a.Take(2)
	if len(x) != 3 || cap(x) != 3 || len(y) != 2 || cap(y) != 2 {
		t.Fatalf("len/cap %d/%d and %d/%d, want 3/3 and 2/2", len(x), cap(x), len(y), cap(y))
	}
	for i := range x {
		x[i] = i + 1
	}
	y[0], y[1] = 7, 8
	x = append(x, 9) // past its capacity: a copy, y untouched
	if !slices.Equal(y, []int{7, 8}) || !slices.Equal(x, []int{1, 2, 3, 9}) {
		t.Fatalf("x %v y %v, want [1 2 3 9] and [7 8]", x, y)
	}
	z := a.Take(2000) // the first block is used up: a new one
	if len(z) != 2000 || slices.ContainsFunc(z, func(v int) bool { return v != 0 }) {
		t.Fatalf("a new block's slice: len %d, not all zero", len(z))
	}
	p := a.One()
	*p = 4
	c := a.Clone([]int{5, 6})
	c[0] = 0
	var zero Slab[string]
	if *p != 4 || !slices.Equal(c, []int{0, 6}) || a.Clone(nil) == nil || zero.Take(0) == nil {
		t.Fatalf("One %d, Clone %v (or a nil clone of nil)", *p, c)
	}
}
