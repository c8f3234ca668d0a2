package dyntable

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// GatherCols and ScatterCols equal Gather and Scatter of each column
// range in turn: on two tables taking the same lookups, with NoRow slots
// (the default row read, the write dropped) and overlapping ranges (a
// later range's write wins); a slot holding no row fails either call
// before it reads or writes anything.
func TestGatherScatterColsEqualPerColumn(t *testing.T) {
	cfg := Config{Dim: 4, StateWidth: 3, Seed: 3, Init: Init{Kind: Normal, Std: 1}, StateInit: []float32{0.5, 0, -1}, Default: []float32{9, 8, 7, 6}, MinCount: 2}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(8, 9))
	ranges := [][2]int{{0, 4}, {4, 3}, {1, 2}}
	for step := range 20 {
		keys := make([]int64, 50)
		for i := range keys {
			keys[i] = int64(step*20 + rng.IntN(80)) // drifting: new keys every step
		}
		slots, sb := make([]int32, len(keys)), make([]int32, len(keys))
		if err := a.Lookup(keys, nil, slots); err != nil {
			t.Fatal(err)
		}
		if err := b.Lookup(keys, nil, sb); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(slots, sb) {
			t.Fatalf("step %d: the tables' slots differ", step)
		}
		if !slices.Contains(slots, NoRow) {
			t.Fatalf("step %d: no key without a row (min_count 2 should leave some)", step)
		}
		var cols []Cols
		for _, r := range ranges {
			c := Cols{Col: r[0], Width: r[1], F: make([]float32, len(slots)*r[1])}
			want := make([]float32, len(c.F))
			if err := a.Gather(slots, r[0], r[1], want); err != nil {
				t.Fatal(err)
			}
			cols = append(cols, c)
			if err := a.GatherCols(slots, cols[len(cols)-1:]); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.F, want) {
				t.Fatalf("step %d: GatherCols of columns %v differs from Gather", step, r)
			}
		}
		got := make([][]float32, len(cols))
		if err := a.GatherCols(slots, cols); err != nil {
			t.Fatal(err)
		}
		for i, c := range cols {
			got[i] = slices.Clone(c.F)
			want := make([]float32, len(c.F))
			if err := a.Gather(slots, c.Col, c.Width, want); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got[i], want) {
				t.Fatalf("step %d: GatherCols of %d ranges, range %d differs from Gather", step, len(cols), i)
			}
		}
		for i := range cols {
			for j := range cols[i].F {
				cols[i].F[j] = rng.Float32()
			}
		}
		if err := a.ScatterCols(slots, cols); err != nil {
			t.Fatal(err)
		}
		for _, c := range cols {
			if err := b.Scatter(slots, c.Col, c.Width, c.F); err != nil {
				t.Fatal(err)
			}
		}
		all, ball := make([]float32, len(slots)*7), make([]float32, len(slots)*7)
		if err := a.Gather(slots, 0, 7, all); err != nil {
			t.Fatal(err)
		}
		if err := b.Gather(slots, 0, 7, ball); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(all, ball) {
			t.Fatalf("step %d: ScatterCols left rows other than Scatter of each range", step)
		}
	}
	live := []int32{0, 1}
	before := make([]float32, 2*7)
	if err := a.Gather(live, 0, 7, before); err != nil {
		t.Fatal(err)
	}
	bad := []int32{0, 1, 1 << 20}
	c := []Cols{{Col: 0, Width: 7, F: make([]float32, 3*7)}}
	for i := range c[0].F {
		c[0].F[i] = 42
	}
	if err := a.ScatterCols(bad, c); err == nil {
		t.Fatal("ScatterCols to a slot holding no row did not fail")
	}
	if err := a.GatherCols(bad, c); err == nil {
		t.Fatal("GatherCols of a slot holding no row did not fail")
	}
	after := make([]float32, 2*7)
	if err := a.Gather(live, 0, 7, after); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, after) {
		t.Fatal("a failed ScatterCols wrote rows")
	}
}
