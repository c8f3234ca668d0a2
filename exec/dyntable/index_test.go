package dyntable

import (
	"math/rand/v2"
	"testing"
)

// The index against a Go map: random inserts and deletes over a key space
// that makes segments split many times and deletions shift entries back
// across the wrap of a segment; every key must be found at its slot and
// every deleted key not found.
func TestIndexAgainstMap(t *testing.T) {
	r := newRows(1)
	x := newIndex()
	ref := map[int64]int32{}
	rng := rand.New(rand.NewPCG(1, 2))
	var live []int64
	for op := range 300000 {
		if len(live) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(live))
			key := live[i]
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			s, pos, slot, found := x.find(&r, key, uint32(indexHash(key)>>32))
			if !found || slot != ref[key] {
				t.Fatalf("op %d: key %d found %v at slot %d, want slot %d", op, key, found, slot, ref[key])
			}
			x.remove(s, pos)
			r.release(slot)
			delete(ref, key)
			continue
		}
		key := int64(rng.Uint64())
		if op%7 == 0 {
			key = int64(op) // dense keys too
		}
		if _, ok := ref[key]; ok {
			continue
		}
		slot, _ := r.alloc()
		r.rec(slot)[0] = uint64(key)
		r.rec(slot)[1] = 0
		if !x.insert(uint32(indexHash(key)>>32), slot) {
			t.Fatal("index full")
		}
		ref[key] = slot
		live = append(live, key)
	}
	if x.n != len(ref) {
		t.Fatalf("index holds %d entries, want %d", x.n, len(ref))
	}
	for key, slot := range ref {
		if _, _, got, found := x.find(&r, key, uint32(indexHash(key)>>32)); !found || got != slot {
			t.Fatalf("key %d: found %v slot %d, want %d", key, found, got, slot)
		}
	}
	for range 10000 {
		key := int64(rng.Uint64())
		if _, ok := ref[key]; ok {
			continue
		}
		if _, _, _, found := x.find(&r, key, uint32(indexHash(key)>>32)); found {
			t.Fatalf("absent key %d found", key)
		}
	}
	if x.segs < 16 {
		t.Errorf("only %d segments: the test did not make the index split", x.segs)
	}
	// Every segment within its bounds, every entry in its segment.
	n := 0
	seen := map[*segment]bool{}
	for i, s := range x.dir {
		if seen[s] {
			continue
		}
		seen[s] = true
		cnt := 0
		for _, e := range s.e {
			if e == 0 {
				continue
			}
			cnt++
			if x.segment(uint32(e>>32)) != s {
				t.Fatalf("directory entry %d: an entry of another segment", i)
			}
		}
		if cnt != int(s.n) || cnt > segMax {
			t.Fatalf("segment holds %d entries, counts %d (max %d)", cnt, s.n, segMax)
		}
		n += cnt
	}
	if n != len(ref) {
		t.Fatalf("segments hold %d entries, want %d", n, len(ref))
	}
}
