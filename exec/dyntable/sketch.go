package dyntable

import "math"

// The admission sketch counts the sightings of keys that have no row. It
// is a doorkeeper Bloom filter in front of a count-min sketch (TinyLFU's
// arrangement, Einziger et al. 2017): a key's first sighting sets
// bloomHashes bits of the filter, and only later sightings reach the
// count-min counters, so the keys seen once (most keys of a click log)
// cost one bit per hash instead of a byte per row of counters. A table
// with min_count 2 and no probability needs only the filter; otherwise
// the filter gets a quarter of the memory and the counters the rest:
// cmRows rows of saturating 8-bit counters, updated conservatively (only
// the counters at the key's minimum grow), which keeps the overestimate
// of rarely seen keys small.
//
// A key's estimate is 0 when its filter bits are not all set, else 1 plus
// its counters' minimum (at most 1 + 255). It never undercounts; it
// overcounts a key when other keys set all its bits (and, past 1, all
// its counters): such a key is admitted early (a false admission).
//
// A filter of fixed size fills as distinct keys arrive, and its false
// positives with it: 1 MiB took 0.5% of a 10M-sighting stream's keys in
// early, 17.5% of another's with 2M distinct keys. So the sketch grows
// (a scalable Bloom filter, Almeida et al. 2007): it is a list of
// generations, each a filter and its counters, each twice the size of the
// one before, and a key first seen goes into the newest, which takes
// keys until its false-positive rate would pass its share of the target
// (falsePositive for the first, half as much for each next, so that all
// of them together stay under twice falsePositive); then the next
// generation starts, while the sketch's memory stays within its bound
// (Config.SketchBytes). A key's sightings are counted in the oldest
// generation that knows it. Past the bound the newest generation fills
// on and false admissions grow as a fixed sketch's do.
// TestFalseAdmissionsAtScale measures them against exact counts.
//
// The sketch is one byte array, the generations one after the other,
// each filter then counters, written in chunks of chunkBytes: a write
// marks its chunk dirty for the next delta and gives a cut in progress
// the chance to save the chunk first. A new generation's chunks are
// appended zeroed.

const (
	bloomHashes = 4
	cmRows      = 4
	chunkBits   = 10
	chunkBytes  = 1 << chunkBits
	// firstSketch is the first generation's size, unless the bound is
	// smaller.
	firstSketch = 1 << 20
	// falsePositive is the first generation's share of the target rate
	// of keys seen once that the filter takes for seen before.
	falsePositive = 0.001
	// maxGenerations keeps a generation's size within an int.
	maxGenerations = 30
)

// generation is one filter and its counters within the sketch's bytes.
type generation struct {
	bloomOff  uint64 // byte offset of the filter
	bloomBits uint64
	cmOff     uint64 // byte offset of the counters
	cmWidth   uint64 // counters per row (0: no counters)
	salt      uint64 // mixed into the key's hash (0 for the first)
	capacity  int64  // the keys it takes before the next generation starts
}

type sketch struct {
	b        []byte
	gens     []generation
	counters bool
	limit    int // the most bytes b may hold
	// keys is the number of keys first seen into the newest generation.
	keys int64
	seed uint64
	// touch is called with a chunk before a byte of it changes.
	touch func(chunk int)
}

// newSketch makes a sketch of its first generation, growing up to about
// limit bytes (rounded up to whole chunks, at least one per part).
func newSketch(limit int, counters bool, seed uint64, touch func(int)) *sketch {
	s := &sketch{counters: counters, limit: limit, seed: seed, touch: touch}
	s.addGeneration(min(limit, firstSketch))
	s.limit = max(s.limit, len(s.b))
	return s
}

// generationBytes is the bytes of a generation of about size bytes:
// its filter, a quarter of size when it has counters, and its counters,
// each a whole number of chunks.
func generationBytes(size int, counters bool) (bloom, cm int) {
	bloom = size
	if counters {
		bloom = size / 4
	}
	bloom = max(chunkBytes, (bloom+chunkBytes-1)&^(chunkBytes-1))
	if counters {
		cm = max(chunkBytes, (size-size/4+chunkBytes-1)&^(chunkBytes-1))
	}
	return bloom, cm
}

// addGeneration appends a generation of about size bytes.
func (s *sketch) addGeneration(size int) {
	bloom, cm := generationBytes(size, s.counters)
	n := len(s.gens)
	g := generation{bloomOff: uint64(len(s.b)), bloomBits: uint64(bloom) * 8, cmOff: uint64(len(s.b) + bloom)}
	if n > 0 {
		g.salt = splitmix(uint64(n))
	}
	if s.counters {
		g.cmWidth = uint64(cm / cmRows)
	}
	// The keys that bring the filter's false-positive rate to its share
	// falsePositive/2^n: (1 - e^(-k n / m))^k = p.
	p := falsePositive / float64(uint64(1)<<min(n, 62))
	g.capacity = int64(-float64(g.bloomBits) / bloomHashes * math.Log(1-math.Pow(p, 1.0/bloomHashes)))
	s.gens = append(s.gens, g)
	s.b = append(s.b, make([]byte, bloom+cm)...)
	s.keys = 0
}

// grown is the sketch's bytes after its generation n, given total bytes
// before it, or 0 when that generation would pass the bound.
func (s *sketch) grown(n, total int) int {
	bloom, cm := generationBytes(firstSketch<<n, s.counters)
	if total+bloom+cm > s.limit || n >= maxGenerations {
		return 0
	}
	return total + bloom + cm
}

// growTo adds generations until the sketch holds bytes bytes, as it did
// when it grew to them; it reports whether that size is one the sketch
// grows through (reaches), and grows nothing when it is not.
func (s *sketch) growTo(bytes int) bool {
	if !s.reaches(bytes) {
		return false
	}
	for len(s.b) < bytes {
		s.addGeneration(firstSketch << len(s.gens))
	}
	return true
}

// reaches reports whether the sketch holds bytes bytes after growing
// through zero or more generations.
func (s *sketch) reaches(bytes int) bool {
	total, n := len(s.b), len(s.gens)
	for total < bytes {
		if total = s.grown(n, total); total == 0 {
			return false
		}
		n++
	}
	return total == bytes
}

func (s *sketch) chunks() int { return len(s.b) >> chunkBits }

// fastrange maps a 32-bit hash onto [0, n) (Lemire).
func fastrange(h uint32, n uint64) uint64 { return uint64(h) * n >> 32 }

// positions fills the filter bit and counter positions of the key of
// hash h in generation g.
func (s *sketch) positions(g *generation, h uint64, bits *[bloomHashes]uint64, cells *[cmRows]uint64) {
	if g.salt != 0 {
		h = splitmix(h ^ g.salt)
	}
	h1, h2 := uint32(h), uint32(h>>32)|1
	for i := range bits {
		bits[i] = g.bloomOff*8 + fastrange(h1+uint32(i)*h2, g.bloomBits)
	}
	if g.cmWidth == 0 {
		return
	}
	m := splitmix(h)
	g1, g2 := uint32(m), uint32(m>>32)|1
	for i := range cells {
		cells[i] = g.cmOff + uint64(i)*g.cmWidth + fastrange(g1+uint32(i)*g2, g.cmWidth)
	}
}

func (s *sketch) set(i uint64, v byte) {
	if s.b[i] != v {
		s.touch(int(i >> chunkBits))
		s.b[i] = v
	}
}

// has reports whether the filter bits are all set.
func (s *sketch) has(bits *[bloomHashes]uint64) bool {
	for _, b := range bits {
		if s.b[b>>3]&(1<<(b&7)) == 0 {
			return false
		}
	}
	return true
}

// estimateAt is the estimate of a key whose filter bits are all set.
func (s *sketch) estimateAt(g *generation, cells *[cmRows]uint64) int {
	if g.cmWidth == 0 {
		return 1
	}
	m := byte(255)
	for _, c := range cells {
		m = min(m, s.b[c])
	}
	return 1 + int(m)
}

// add counts c more sightings of key and returns its estimate before and
// after. It grows the sketch when the newest generation is full.
func (s *sketch) add(key int64, c int) (before, after int) {
	var bits [bloomHashes]uint64
	var cells [cmRows]uint64
	h := sketchHash(key, s.seed)
	gi := -1
	for i := range s.gens {
		s.positions(&s.gens[i], h, &bits, &cells)
		if s.has(&bits) {
			gi = i
			break
		}
	}
	if gi < 0 { // a key first seen: into the newest generation
		gi = len(s.gens) - 1
		if gi > 0 {
			s.positions(&s.gens[gi], h, &bits, &cells)
		}
		for _, b := range bits {
			s.set(b>>3, s.b[b>>3]|1<<(b&7))
		}
		c--
		after = 1
		s.keys++
	} else {
		before = s.estimateAt(&s.gens[gi], &cells)
	}
	g := &s.gens[gi]
	if g.cmWidth == 0 {
		after = max(after, before) + c // the filter remembers one sighting, a call sees c
	} else {
		if c > 0 {
			m := 255
			for _, cell := range cells {
				m = min(m, int(s.b[cell]))
			}
			v := byte(min(m+c, 255))
			for _, cell := range cells {
				if s.b[cell] < v {
					s.set(cell, v)
				}
			}
		}
		after = s.estimateAt(g, &cells)
	}
	if n := len(s.gens); s.keys >= s.gens[n-1].capacity && s.grown(n, len(s.b)) > 0 {
		s.addGeneration(firstSketch << n)
	}
	return before, after
}
