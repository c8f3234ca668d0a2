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

// An identity set answers as the same rows added one by one: Slot and Add
// of the rows it holds, Slot of others, Add of rows past n (which builds
// the index), and a Reset after either.
func TestRowSetIdentityMatchesAdds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	id, ref := NewRowSet(300), NewRowSet(300)
	for step := 0; step < 200; step++ {
		n := rng.IntN(200)
		id.Identity(n)
		ref.Reset()
		for i := range n {
			ref.Add(int32(i))
		}
		for range 50 {
			r := rng.Int32N(400) - 50
			if got, want := id.Slot(r), ref.Slot(r); got != want {
				t.Fatalf("step %d, n %d: Slot(%d) = %d, want %d", step, n, r, got, want)
			}
			if rng.IntN(8) == 0 && r >= 0 && len(ref.IDs) < 300 {
				gs, gf := id.Add(r)
				ws, wf := ref.Add(r)
				if gs != ws || gf != wf {
					t.Fatalf("step %d, n %d: Add(%d) = %d, %v; want %d, %v", step, n, r, gs, gf, ws, wf)
				}
			}
		}
		if len(id.IDs) != len(ref.IDs) {
			t.Fatalf("step %d: %d ids, want %d", step, len(id.IDs), len(ref.IDs))
		}
		for i, r := range ref.IDs {
			if id.IDs[i] != r {
				t.Fatalf("step %d: IDs[%d] = %d, want %d", step, i, id.IDs[i], r)
			}
		}
		if rng.IntN(2) == 0 { // an identity set reset to hashed use
			id.Reset()
			ref.Reset()
			for range 20 {
				r := rng.Int32N(1000)
				gs, gf := id.Add(r)
				ws, wf := ref.Add(r)
				if gs != ws || gf != wf {
					t.Fatalf("step %d after Reset: Add(%d) = %d, %v; want %d, %v", step, r, gs, gf, ws, wf)
				}
			}
		}
	}
}
