package dyntable

import (
	"math"
	"math/rand/v2"
	"testing"
)

// collisionFree reports whether no key's sketch cells are all shared with
// other keys: on such keys the sketch counts exactly.
func collisionFree(s *sketch, keys []int64) bool {
	bitOwners := map[uint64]int{}
	cellOwners := map[uint64]int{}
	pos := make([][bloomHashes]uint64, len(keys))
	cells := make([][cmRows]uint64, len(keys))
	for i, k := range keys {
		s.positions(k, &pos[i], &cells[i])
		for _, b := range dedup(pos[i][:]) {
			bitOwners[b]++
		}
		if s.cmWidth > 0 {
			for _, c := range dedup(cells[i][:]) {
				cellOwners[c]++
			}
		}
	}
	for i := range keys {
		shared := true
		for _, b := range pos[i] {
			shared = shared && bitOwners[b] > 1
		}
		if shared {
			return false
		}
		if s.cmWidth > 0 {
			shared = true
			for _, c := range cells[i] {
				shared = shared && cellOwners[c] > 1
			}
			if shared {
				return false
			}
		}
	}
	return true
}

func dedup(x []uint64) []uint64 {
	var out []uint64
	for _, v := range x {
		seen := false
		for _, o := range out {
			seen = seen || o == v
		}
		if !seen {
			out = append(out, v)
		}
	}
	return out
}

// min_count N: on keys whose sketch cells no other key fully shares,
// a key gets its row at exactly its N-th sighting, so the keys seen
// fewer than N times have none and the others one each, and the
// admissions are exactly the keys seen N times or more. Sightings come
// one per step or several at once (counts), in random order.
func TestAdmissionMinCount(t *testing.T) {
	for _, n := range []int{2, 3, 7} {
		cfg := Config{Dim: 2, MinCount: n, SketchBytes: 256 << 10}
		tab, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		const keys = 3000
		ks := make([]int64, keys)
		want := make([]int, keys) // planned sightings
		for i := range ks {
			ks[i] = int64(rng.Uint64())
			want[i] = 1 + rng.IntN(2*n)
		}
		if !collisionFree(tab.sk, ks) {
			t.Fatalf("min_count %d: the test's keys share sketch cells; pick other keys", n)
		}
		seen := make([]int, keys)
		rowAt := make([]int, keys) // the sighting that gave the key its row
		step := int64(0)
		for left := true; left; step++ {
			left = false
			if err := tab.Advance(step); err != nil {
				t.Fatal(err)
			}
			var batch []int64
			var counts []uint32
			var idx []int
			for i := range ks {
				if seen[i] < want[i] && rng.IntN(3) == 0 {
					c := min(want[i]-seen[i], 1+rng.IntN(2))
					batch, counts, idx = append(batch, ks[i]), append(counts, uint32(c)), append(idx, i)
				}
				left = left || seen[i] < want[i]
			}
			slots := make([]int32, len(batch))
			if err := tab.Lookup(batch, counts, slots); err != nil {
				t.Fatal(err)
			}
			for j, i := range idx {
				before := seen[i]
				seen[i] += int(counts[j])
				if slots[j] >= 0 && rowAt[i] == 0 {
					rowAt[i] = seen[i]
				}
				if slots[j] < 0 && seen[i] >= n {
					t.Fatalf("min_count %d: key %d seen %d times has no row", n, ks[i], seen[i])
				}
				if rowAt[i] == seen[i] && before >= n {
					t.Fatalf("min_count %d: key %d got its row at sighting %d, after %d", n, ks[i], seen[i], before)
				}
			}
		}
		slots := make([]int32, keys)
		tab.Find(ks, slots)
		admitted := 0
		for i := range ks {
			if (slots[i] >= 0) != (want[i] >= n) {
				t.Fatalf("min_count %d: key seen %d times: slot %d", n, want[i], slots[i])
			}
			if want[i] >= n {
				admitted++
				if rowAt[i] < n || rowAt[i] > n+1 { // a call counting 2 may pass N by one
					t.Errorf("min_count %d: key admitted at sighting %d", n, rowAt[i])
				}
			}
		}
		if st := tab.Stats(); st.Admitted != uint64(admitted) || st.Live != int64(admitted) {
			t.Errorf("min_count %d: %d admitted, %d live; %d keys were seen %d times or more", n, st.Admitted, st.Live, admitted, n)
		}
	}
}

// With a probability p and no min_count, a key seen k times has a row
// with probability 1-(1-p)^k (each sighting draws anew, from the seed
// and the key), and the draws do not depend on the order of arrival: two
// tables fed the same sightings in different orders admit the same keys.
func TestAdmissionProbability(t *testing.T) {
	cfg := Config{Dim: 1, AdmitProb: 0.25, Seed: 3}
	a, _ := New(cfg)
	b, _ := New(cfg)
	const keys = 20000
	ks := make([]int64, keys)
	for i := range ks {
		ks[i] = int64(i)*7919 + 11
	}
	slots := make([]int32, keys)
	for k := range 3 {
		if err := a.Lookup(ks, nil, slots); err != nil {
			t.Fatal(err)
		}
		rev := make([]int64, keys)
		for i := range ks {
			rev[i] = ks[keys-1-i]
		}
		if err := b.Lookup(rev, nil, slots); err != nil {
			t.Fatal(err)
		}
		p := 1 - math.Pow(0.75, float64(k+1))
		got := float64(a.Stats().Live) / keys
		if sd := math.Sqrt(p * (1 - p) / keys); math.Abs(got-p) > 5*sd {
			t.Errorf("after %d sightings %.4f of the keys have a row, want %.4f ± %.4f", k+1, got, p, 5*sd)
		}
	}
	sa, sb := make([]int32, keys), make([]int32, keys)
	a.Find(ks, sa)
	b.Find(ks, sb)
	for i := range ks {
		if (sa[i] >= 0) != (sb[i] >= 0) {
			t.Fatalf("key %d has a row in one order of arrival and not in the other", ks[i])
		}
	}
}

// The false-admission rate of min_count 2 at the default sketch memory
// (1 MiB, a Bloom filter of 2^23 bits and 4 hashes): keys seen once are
// admitted when the keys before them set all their bits. The measured
// rate matches the filter's false-positive rate, (1-e^(-4i/m))^4 for the
// i-th key, averaged over the keys, within 25%; and for min_count 3
// (a quarter of the memory to the filter, the rest to counters) keys seen
// twice are admitted early at a rate the test reports.
func TestFalseAdmissionRate(t *testing.T) {
	q := 500000
	if raceEnabled || testing.Short() {
		q = 100000
	}
	tab, err := New(Config{Dim: 1, MinCount: 2, SketchBytes: DefaultSketchBytes})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(17, 17))
	key := make([]int64, 1)
	slot := make([]int32, 1)
	m := float64(tab.sk.bloomBits)
	var predicted float64
	for i := range q {
		key[0] = int64(rng.Uint64())
		if err := tab.Lookup(key, nil, slot); err != nil {
			t.Fatal(err)
		}
		predicted += math.Pow(1-math.Exp(-bloomHashes*float64(i)/m), bloomHashes)
	}
	got := float64(tab.Stats().Admitted)
	t.Logf("min_count 2, %d bytes: %d keys seen once, %.0f admitted (%.4f%%; at the end %.4f%%), filter predicts %.0f",
		len(tab.sk.b), q, got, 100*got/float64(q), 100*math.Pow(1-math.Exp(-bloomHashes*float64(q)/m), bloomHashes), predicted)
	if math.Abs(got-predicted) > 0.25*predicted+10 {
		t.Errorf("%.0f keys seen once were admitted; the filter's false-positive rate predicts %.0f", got, predicted)
	}

	// min_count 3: every key seen twice; early admissions at the second sighting.
	tab, _ = New(Config{Dim: 1, MinCount: 3, SketchBytes: DefaultSketchBytes})
	keys := make([]int64, q/2)
	for i := range keys {
		keys[i] = int64(rng.Uint64())
	}
	for pass := range 2 {
		for _, k := range keys {
			key[0] = k
			if err := tab.Lookup(key, nil, slot); err != nil {
				t.Fatal(err)
			}
		}
		if pass == 0 && tab.Stats().Admitted != 0 {
			// after one sighting each, only a key both filter and counters overcount gets in
			t.Logf("min_count 3: %d keys admitted at their first sighting", tab.Stats().Admitted)
		}
	}
	early := tab.Stats().Admitted
	t.Logf("min_count 3, %d bytes (%d filter bits, %d x %d counters): %d keys seen twice, %d admitted (%.4f%%)",
		len(tab.sk.b), tab.sk.bloomBits, cmRows, tab.sk.cmWidth, len(keys), early, 100*float64(early)/float64(len(keys)))
	// A key seen twice is admitted only when all 4 of its counters were
	// raised by others: at most the count-min bound (1-e^(-n/w))^4 for n
	// keys counted into w counters a row.
	bound := math.Pow(1-math.Exp(-float64(len(keys))/float64(tab.sk.cmWidth)), cmRows)
	if float64(early) > bound*float64(len(keys))+10 {
		t.Errorf("min_count 3: %d of %d keys seen twice admitted, above the count-min bound %.4f", early, len(keys), bound)
	}
}
