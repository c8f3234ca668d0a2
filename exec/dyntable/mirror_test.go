package dyntable

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// A mirror fed as a serving replica is (every few steps, coalesced: the
// slots each shard wrote since the last delta, read then, and the shard's
// watermark) reads every key as the shards do: the same value for a live
// row, the default for a key evicted by ttl or capacity, expired,
// re-admitted or never admitted. Shards of every eviction rule, with
// admission by count, on a drifting vocabulary that evicts and re-admits
// keys all along; a full state (ReadRange) starts the mirror, and a shard
// dropped and sent whole again (a restarted pserver) reads as before.
func TestMirrorReadsAsTheShards(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"ttl", Config{TTL: 6}},
		{"lru", Config{Capacity: 40}},
		{"lfu", Config{Capacity: 40, Evict: LFU}},
		{"ttl+lru", Config{TTL: 9, Capacity: 30, MinCount: 2}},
		{"forever", Config{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			const shards, dim = 2, 3
			cfg := c.cfg
			cfg.Dim, cfg.StateWidth, cfg.Seed = dim, 2, 7
			cfg.Init = Init{Kind: Normal, Std: 1}
			cfg.Default = []float32{-1, -2, -3}
			src := make([]*Table, shards)
			for i := range src {
				var err error
				if src[i], err = New(cfg); err != nil {
					t.Fatal(err)
				}
			}
			m, err := NewMirror(cfg, shards)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			seen := map[int64]bool{}
			var slots []int32
			// send is a delta of shard i: Full (ReadRange) or its written slots.
			send := func(i int, full bool) {
				var b Batch
				if full {
					if err := m.DropShard(i); err != nil {
						t.Fatal(err)
					}
					src[i].Written(nil) // a full state holds them
					for lo := int32(0); lo >= 0; {
						lo = src[i].ReadRange(lo, 7, &b)
					}
				} else {
					slots = src[i].Written(slots[:0])
					src[i].ReadSlots(slots, &b)
				}
				if err := m.MirrorRows(&b); err != nil {
					t.Fatal(err)
				}
				if err := m.Expire(i, src[i].Watermark()); err != nil {
					t.Fatal(err)
				}
			}
			check := func(step int) {
				t.Helper()
				keys := make([]int64, 0, len(seen))
				for k := range seen {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				got := make([]float32, len(keys)*dim)
				if err := m.Read(keys, got); err != nil {
					t.Fatal(err)
				}
				want := make([]float32, dim)
				for j, k := range keys {
					if err := src[ShardOf(k, shards)].Read([]int64{k}, want); err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(got[j*dim:(j+1)*dim], want) {
						t.Fatalf("step %d: key %d reads %v on the mirror, %v on its shard", step, k, got[j*dim:(j+1)*dim], want)
					}
				}
			}
			for i := range src {
				src[i].Publish(true)
			}
			grads := make([]float32, 0, 64*dim)
			for step := 0; step < 300; step++ {
				for i, s := range src {
					if err := s.Advance(int64(step)); err != nil {
						t.Fatal(err)
					}
					// keys drift: each step draws from a window that moves on
					var keys []int64
					for range 40 {
						k := int64(step/3 + rng.IntN(120))
						if ShardOf(k, shards) == i {
							keys = append(keys, k)
							seen[k] = true
						}
					}
					keys = slices.Compact(slices.Sorted(slices.Values(keys)))
					sl := make([]int32, len(keys))
					rows := make([]float32, len(keys)*dim)
					if err := s.Pull(keys, nil, sl, rows); err != nil {
						t.Fatal(err)
					}
					grads = grads[:0]
					for range len(keys) * dim {
						grads = append(grads, float32(rng.NormFloat64()))
					}
					if err := s.Scatter(sl, 0, dim, grads); err != nil {
						t.Fatal(err)
					}
					s.Sweep(64)
				}
				switch {
				case step == 20:
					for i := range src {
						send(i, true)
					}
				case step > 20 && step%5 == 0: // coalesced: five steps a delta
					for i := range src {
						send(i, step == 150 && i == 1) // shard 1 sent whole again at 150
					}
					m.SweepMirror(50)
					check(step)
				}
			}
			if st := src[0].Stats(); c.name != "forever" && st.EvictedTTL+st.EvictedCapacity == 0 {
				t.Fatalf("no row was evicted: the test shows nothing (%+v)", st)
			}
		})
	}
}
