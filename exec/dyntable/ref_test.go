package dyntable

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// refTable is the table's specification written the simple way: a Go map
// of rows, exact sighting counts, and eviction by scanning every row. The
// tests drive a Table and a refTable with the same workload and require
// the same rows, bit for bit, and the same counts.
type refRow struct {
	f    []float32
	meta uint64
}

type refTable struct {
	cfg                                       Config
	rows                                      map[int64]*refRow
	seen                                      map[int64]int
	now                                       int64
	w                                         int64 // LFU: the priority evicted last
	admitted, evictedTTL, evictedCap, deleted uint64
}

func newRef(cfg Config) *refTable {
	return &refTable{cfg: cfg, rows: map[int64]*refRow{}, seen: map[int64]int{}}
}

func (r *refTable) clone() *refTable {
	c := *r
	c.rows = map[int64]*refRow{}
	for k, v := range r.rows {
		c.rows[k] = &refRow{f: slices.Clone(v.f), meta: v.meta}
	}
	c.seen = map[int64]int{}
	for k, v := range r.seen {
		c.seen[k] = v
	}
	return &c
}

// refInit is a new row as Config.Init documents it.
func refInit(cfg Config, key int64) []float32 {
	f := make([]float32, cfg.Dim+cfg.StateWidth)
	z := uint64(key) + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	rng := rand.New(rand.NewPCG(cfg.Seed, z^z>>31))
	for j := range cfg.Dim {
		switch in := cfg.Init; in.Kind {
		case Constant:
			f[j] = float32(in.Value)
		case Uniform:
			f[j] = float32(in.Min + (in.Max-in.Min)*rng.Float64())
		case Normal:
			f[j] = float32(in.Mean + in.Std*rng.NormFloat64())
		}
	}
	copy(f[cfg.Dim:], cfg.StateInit)
	return f
}

func (r *refTable) lfu() bool { return r.cfg.Capacity > 0 && r.cfg.Evict == LFU }

func (r *refTable) advance(step int64) {
	r.now = step
	if r.cfg.TTL > 0 {
		for k, row := range r.rows {
			if int64(uint32(row.meta)) <= step-r.cfg.TTL {
				delete(r.rows, k)
				r.evictedTTL++
			}
		}
	}
	for r.cfg.Capacity > 0 && len(r.rows) > r.cfg.Capacity {
		low := int64(math.MaxInt64)
		for _, row := range r.rows {
			low = min(low, r.score(row.meta))
		}
		if !r.lfu() && low >= step {
			break // rows seen at this step stay
		}
		for k, row := range r.rows {
			if r.score(row.meta) == low {
				delete(r.rows, k)
				r.evictedCap++
			}
		}
		if r.lfu() {
			r.w = low
		}
	}
}

func (r *refTable) score(m uint64) int64 {
	if r.lfu() {
		return int64(m)
	}
	return int64(uint32(m))
}

// admit counts c sightings of a key without a row: the sketch's counting
// when no two keys share its cells (a filter remembers one sighting; the
// counters stop at 1 + 255).
func (r *refTable) admit(key int64, c int) bool {
	cfg := r.cfg
	if cfg.admitsAll() {
		return true
	}
	before := r.seen[key]
	after := before + c
	if cfg.MinCount > 2 || cfg.prob() < 1 {
		after = min(after, 256)
		r.seen[key] = after
	} else {
		r.seen[key] = 1
	}
	for n := max(before+1, cfg.MinCount); n <= after; n++ {
		if cfg.prob() >= 1 || admitDraw(cfg.Seed, key, n) < cfg.prob() {
			return true
		}
	}
	return false
}

func (r *refTable) lookup(key int64, c int) bool {
	if row, ok := r.rows[key]; ok {
		if r.lfu() {
			row.meta = uint64(min(int64(row.meta)+int64(c), r.w+1<<16))
		} else {
			row.meta = uint64(r.now) | min(row.meta>>32+uint64(c), 0xffffffff)<<32
		}
		return true
	}
	if !r.admit(key, c) {
		return false
	}
	row := &refRow{f: refInit(r.cfg, key), meta: uint64(r.now) | uint64(c)<<32}
	if r.lfu() {
		row.meta = uint64(r.w + int64(min(c, 1<<16)))
	}
	r.rows[key] = row
	r.admitted++
	return true
}

// sameAs reports how tab differs from the reference: rows (bitwise),
// meta, counts.
func sameAs(tab *Table, r *refTable) error {
	st := tab.Stats()
	if st.Live != int64(len(r.rows)) {
		return fmt.Errorf("%d live rows, reference %d", st.Live, len(r.rows))
	}
	if got, want := [4]uint64{st.Admitted, st.EvictedTTL, st.EvictedCapacity, st.Deleted}, [4]uint64{r.admitted, r.evictedTTL, r.evictedCap, r.deleted}; got != want {
		return fmt.Errorf("admitted, evicted by ttl, by capacity, deleted: %v, reference %v", got, want)
	}
	keys := make([]int64, 0, len(r.rows))
	for k := range r.rows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slots := make([]int32, len(keys))
	tab.Find(keys, slots)
	w := tab.width
	got := make([]float32, len(keys)*w)
	if err := tab.Gather(slots, 0, w, got); err != nil {
		return err
	}
	for i, k := range keys {
		if slots[i] < 0 {
			return fmt.Errorf("key %d has no row; the reference has one", k)
		}
		row := r.rows[k]
		if m := tab.rows.meta(slots[i]); m != row.meta {
			return fmt.Errorf("key %d: meta %#x, reference %#x", k, m, row.meta)
		}
		for j, v := range row.f {
			if math.Float32bits(got[i*w+j]) != math.Float32bits(v) {
				return fmt.Errorf("key %d column %d: %v, reference %v", k, j, got[i*w+j], v)
			}
		}
	}
	return nil
}

// workload drives a table and a reference through steps of lookups,
// updates, deletes and sweeps, drawn from rng. Keys drift: the hot set
// moves by a few keys per step, so rows fade out of use.
type workload struct {
	rng      *rand.Rand
	universe int
	maxBatch int
	deletes  bool
}

func (wl *workload) keys(step int64) []int64 {
	n := 1 + wl.rng.IntN(wl.maxBatch)
	seen := map[int64]bool{}
	var out []int64
	for range n {
		// Zipf-like: small offsets are frequent.
		off := int64(math.Floor(math.Pow(wl.rng.Float64(), 3) * float64(wl.universe)))
		k := (step*3 + off) * 0x1000193 // spread over the key space, some negative
		if wl.rng.IntN(8) == 0 {
			k = -k
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// step runs one step on tab and, if r is not nil, on the reference, and
// reports the first difference of the lookups.
func (wl *workload) step(tab *Table, r *refTable, step int64) error {
	if err := tab.Advance(step); err != nil {
		return err
	}
	if r != nil {
		r.advance(step)
	}
	keys := wl.keys(step)
	var counts []uint32
	if wl.rng.IntN(2) == 0 {
		counts = make([]uint32, len(keys))
		for i := range counts {
			counts[i] = uint32(1 + wl.rng.IntN(3))
			if wl.rng.IntN(60) == 0 {
				counts[i] = 40000 // saturates the sketch's counters and an LFU priority
			}
		}
	}
	slots := make([]int32, len(keys))
	if err := tab.Lookup(keys, counts, slots); err != nil {
		return err
	}
	if r != nil {
		for i, k := range keys {
			c := 1
			if counts != nil {
				c = int(counts[i])
			}
			if has := r.lookup(k, c); has != (slots[i] >= 0) {
				return fmt.Errorf("step %d: key %d got slot %d; the reference has a row: %v", step, k, slots[i], has)
			}
		}
	}
	// An update of the rows that have one, as an optimizer's: new value
	// and state from the old, written back by slot (sometimes only the
	// value, sometimes only the state).
	w := tab.width
	col, width := 0, w
	switch wl.rng.IntN(3) {
	case 1:
		width = tab.dim
	case 2:
		col, width = tab.dim, w-tab.dim
	}
	buf := make([]float32, len(keys)*width)
	if err := tab.Gather(slots, col, width, buf); err != nil {
		return err
	}
	for i := range buf {
		buf[i] = buf[i]*0.75 + float32(i%5) - 0.125*float32(step%3)
	}
	if err := tab.Scatter(slots, col, width, buf); err != nil {
		return err
	}
	if r != nil {
		for i, k := range keys {
			if row := r.rows[k]; row != nil {
				copy(row.f[col:col+width], buf[i*width:(i+1)*width])
			}
		}
	}
	if wl.deletes && wl.rng.IntN(10) == 0 {
		del := keys[:min(len(keys), 3)]
		tab.Delete(del)
		if r != nil {
			for _, k := range del {
				if _, ok := r.rows[k]; ok {
					delete(r.rows, k)
					r.deleted++
				}
			}
		}
	}
	tab.Sweep(wl.rng.IntN(300))
	return nil
}

var refConfigs = []struct {
	name string
	cfg  Config
}{
	{"plain", Config{Dim: 4, StateWidth: 4, Seed: 7, Init: Init{Kind: Normal, Std: 0.1}}},
	{"ttl-mincount2", Config{Dim: 3, StateWidth: 1, Seed: 8, Init: Init{Kind: Uniform, Min: -0.5, Max: 0.5}, StateInit: []float32{0.1}, MinCount: 2, TTL: 6}},
	{"lru-ttl-mincount3-prob", Config{Dim: 5, StateWidth: 10, Seed: 9, Init: Init{Kind: Normal, Mean: 1, Std: 2}, MinCount: 3, AdmitProb: 0.5, TTL: 40, Capacity: 300}},
	{"lru", Config{Dim: 2, Seed: 10, Init: Init{Kind: Constant, Value: 0.25}, Capacity: 200, AdmitProb: 0.3}},
	{"lfu-mincount2", Config{Dim: 4, StateWidth: 2, Seed: 11, Init: Init{Kind: Normal, Std: 1}, MinCount: 2, Capacity: 250, Evict: LFU}},
	{"lfu", Config{Dim: 1, Seed: 12, Capacity: 100, Evict: LFU}},
	{"mincount256", Config{Dim: 2, StateWidth: 2, Seed: 13, Init: Init{Kind: Normal, Std: 1}, MinCount: 256, TTL: 100}},
}

// A table and its specification agree step by step on random drifting
// workloads: which keys get a row and when, every row's value, state and
// meta bit for bit, and the counts of admissions, evictions by ttl and by
// capacity and deletions, under each admission and eviction setting.
func TestTableAgainstReference(t *testing.T) {
	for _, c := range refConfigs {
		t.Run(c.name, func(t *testing.T) {
			tab, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := newRef(c.cfg)
			wl := &workload{rng: rand.New(rand.NewPCG(3, uint64(len(c.name)))), universe: 1500, maxBatch: 80, deletes: true}
			for step := int64(0); step < 400; step++ {
				if err := wl.step(tab, r, step); err != nil {
					t.Fatal(err)
				}
				if err := sameAs(tab, r); err != nil {
					t.Fatalf("after step %d: %v", step, err)
				}
			}
			st := tab.Stats()
			t.Logf("%+v", st)
			if st.Admitted == 0 || (c.cfg.TTL > 0 && st.EvictedTTL == 0) || (c.cfg.Capacity > 0 && st.EvictedCapacity == 0) || st.Deleted == 0 {
				t.Errorf("the workload did not exercise the table: %+v", st)
			}
			if c.cfg.MinCount > 1 || c.cfg.AdmitProb > 0 {
				refused := 0
				for k := range r.seen {
					if r.rows[k] == nil {
						refused++
					}
				}
				if refused == 0 {
					t.Errorf("no key was refused admission")
				}
			}
		})
	}
}
