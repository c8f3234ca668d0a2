package tensor

import (
	"math/rand/v2"
	"testing"
)

// RowSet against a map, over many steps of colliding rows: every Add
// returns the slot of the row's first Add since the last Reset, and Reset
// forgets every row (whichever way it clears).
func TestRowSetMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := NewRowSet(300)
	for step := 0; step < 200; step++ {
		s.Reset()
		want := map[int32]int{}
		n := rng.IntN(300) + 1
		span := int32(rng.IntN(1000) + 1) // small spans collide, large ones probe
		for i := 0; i < n; i++ {
			r := rng.Int32N(span) * int32(1+rng.IntN(3)) * 64
			if _, ok := want[r]; !ok && len(want) == 300 {
				continue
			}
			slot, fresh := s.Add(r)
			w, seen := want[r]
			if !seen {
				w = len(want)
				want[r] = w
			}
			if slot != w || fresh == seen {
				t.Fatalf("step %d: Add(%d) = %d, %v; want %d, %v", step, r, slot, fresh, w, !seen)
			}
		}
		for r, w := range want {
			if got := s.Slot(r); got != w {
				t.Fatalf("step %d: Slot(%d) = %d, want %d", step, r, got, w)
			}
		}
		if len(s.IDs) != len(want) {
			t.Fatalf("step %d: %d ids, want %d", step, len(s.IDs), len(want))
		}
		if s.Slot(-5) != -1 {
			t.Fatal("Slot of an absent row is not -1")
		}
	}
}
