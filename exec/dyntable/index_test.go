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

// resolveHomes against find: in a table of 200,000 rows, a sixth of them
// deleted (entries shifted back), every live key's slot is found, also
// when its entry is away from its home position (a sizeable share is, or
// the test would not test the probe), but for the few behind another
// key's entry with the same 32-bit tag, and no absent key gets one.
func TestResolveHomesAgainstFind(t *testing.T) {
	tab, err := New(Config{Dim: 2})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	keys := make([]int64, 200000)
	for i := range keys {
		keys[i] = int64(rng.Uint64())
	}
	slots := make([]int32, len(keys))
	if err := tab.Lookup(keys, nil, slots); err != nil {
		t.Fatal(err)
	}
	var gone []int64
	for i := 0; i < len(keys); i += 6 {
		gone = append(gone, keys[i])
	}
	tab.Delete(gone)
	for range 20000 {
		keys = append(keys, int64(rng.Uint64())) // absent
	}
	offHome, live, collisions := 0, 0, 0
	for lo := 0; lo < len(keys); lo += lookupChunk {
		chunk := keys[lo:min(lo+lookupChunk, len(keys))]
		tab.resolveHomes(chunk)
		for j, key := range chunk {
			hi := uint32(indexHash(key) >> 32)
			s, pos, want, found := tab.idx.find(&tab.rows, key, hi)
			if !found {
				want = -1
			} else {
				live++
				if pos != hi&segMask || s != tab.idx.segment(hi) {
					offHome++
				}
			}
			if tab.his[j] != hi {
				t.Fatalf("key %d: his %x, want %x", key, tab.his[j], hi)
			}
			got := tab.homes[j]
			if got == -1 && found {
				// Allowed when a key whose hash has the same top 32 bits
				// comes first in the probe: the lookup then calls find.
				if e := tab.idx.probe(hi); e != 0 && int32(uint32(e))-1 != want && tab.rows.key(int32(uint32(e))-1) != key {
					collisions++
					continue
				}
			}
			if got != want {
				t.Fatalf("key %d (found %v): resolveHomes gave slot %d, find %d", key, found, got, want)
			}
		}
	}
	if live != 200000-len(gone) {
		t.Fatalf("%d live keys, want %d", live, 200000-len(gone))
	}
	if offHome < live/20 {
		t.Fatalf("only %d of %d entries away from home: the probe went untested", offHome, live)
	}
	if collisions > 10 {
		t.Fatalf("%d keys not resolved for a shared tag, where a few are expected", collisions)
	}
	t.Logf("%d of %d live entries away from their home position, %d behind another key's equal tag", offHome, live, collisions)
}
