package dyntable

import (
	"math"
	"math/rand/v2"
	"testing"
)

// PullHinted gives what Pull gives, whatever its hints: two tables take
// the same steps (drifting keys with repeats, sweeps, deletions) on every
// configuration, one through Pull, the other through PullHinted with, per
// key, the slot its last pull returned, a random slot (past the table's
// end too), or none, under the current generation (so that wrong hints
// are checked, not dropped) or an old one; the slots, the values pulled
// and the counters agree at every step, and the hinted table equals the
// reference at the end. It also checks that hints were taken: a table
// without removals keeps its generation.
func TestPullHintedEqualsPull(t *testing.T) {
	for _, c := range refConfigs {
		t.Run(c.name, func(t *testing.T) {
			a, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := newRef(c.cfg)
			rng := rand.New(rand.NewPCG(23, uint64(len(c.name))))
			last := map[int64]int32{}
			for step := int64(0); step < 300; step++ {
				for _, tab := range []*Table{a, b} {
					if err := tab.Advance(step); err != nil {
						t.Fatal(err)
					}
				}
				r.advance(step)
				n := 1 + rng.IntN(200)
				keys, counts := make([]int64, n), make([]uint32, n)
				hints := make([]int32, n)
				for i := range keys {
					keys[i] = step/4 + int64(rng.IntN(120))
					counts[i] = uint32(1 + rng.IntN(2))
					switch rng.IntN(3) {
					case 0:
						hints[i] = -1
						if s, ok := last[keys[i]]; ok {
							hints[i] = s
						}
					case 1:
						hints[i] = rng.Int32N(400)
					default:
						hints[i] = -1
					}
				}
				gen := b.Generation()
				if rng.IntN(4) == 0 {
					gen-- // an old generation: the hints are not used
				}
				sa, sb := make([]int32, n), make([]int32, n)
				da, db := make([]float32, n*c.cfg.Dim), make([]float32, n*c.cfg.Dim)
				if err := a.Pull(keys, counts, sa, da); err != nil {
					t.Fatal(err)
				}
				if err := b.PullHinted(keys, counts, hints, gen, sb, db); err != nil {
					t.Fatal(err)
				}
				for i, k := range keys {
					r.lookup(k, int(counts[i]))
					if sa[i] != sb[i] {
						t.Fatalf("step %d: key %d (hint %d): slot %d pulled, %d hinted", step, k, hints[i], sa[i], sb[i])
					}
					last[k] = sb[i]
				}
				for i := range da {
					if math.Float32bits(da[i]) != math.Float32bits(db[i]) {
						t.Fatalf("step %d: value %d: %g pulled, %g hinted", step, i, da[i], db[i])
					}
				}
				if step%7 == 0 {
					a.Sweep(64)
					b.Sweep(64)
				}
				if step%50 == 49 {
					del := []int64{keys[0], keys[n/2]}
					a.Delete(del)
					b.Delete(del)
					for _, k := range del {
						if _, ok := r.rows[k]; ok {
							delete(r.rows, k)
							r.deleted++
						}
					}
				}
				if sa, sb := a.Stats(), b.Stats(); sa != sb {
					t.Fatalf("step %d: stats %+v pulled, %+v hinted", step, sa, sb)
				}
			}
			if err := sameAs(b, r); err != nil {
				t.Fatal(err)
			}
		})
	}
	plain, err := New(refConfigs[0].cfg)
	if err != nil {
		t.Fatal(err)
	}
	keys, slots := []int64{1, 2, 3}, make([]int32, 3)
	if err := plain.Pull(keys, nil, slots, make([]float32, 3*refConfigs[0].cfg.Dim)); err != nil {
		t.Fatal(err)
	}
	if g := plain.Generation(); g != 0 {
		t.Fatalf("a table that removed no row is at generation %d, want 0 (hints would never be taken)", g)
	}
	plain.Delete(keys[:1])
	if g := plain.Generation(); g != 1 {
		t.Fatalf("after a deletion: generation %d, want 1", g)
	}
}
