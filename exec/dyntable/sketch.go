package dyntable

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
// its counters): such a key is admitted early (a false admission; see
// TestFalseAdmissionRate for the rate at a given memory).
//
// The sketch is one byte array, filter then counters, written in chunks
// of chunkBytes: a write marks its chunk dirty for the next delta and
// gives a cut in progress the chance to save the chunk first.

const (
	bloomHashes = 4
	cmRows      = 4
	chunkBits   = 10
	chunkBytes  = 1 << chunkBits
)

type sketch struct {
	b         []byte
	bloomBits uint64 // bits of the filter, at the start of b
	cmWidth   uint64 // counters per row (0: no counters)
	cmOff     uint64 // byte offset of the counters
	seed      uint64
	// touch is called with a chunk before a byte of it changes.
	touch func(chunk int)
}

// newSketch sizes a sketch of about bytes bytes (rounded up to whole
// chunks, at least one per part).
func newSketch(bytes int, counters bool, seed uint64, touch func(int)) *sketch {
	s := &sketch{seed: seed, touch: touch}
	bloom := bytes
	if counters {
		bloom = bytes / 4
	}
	bloom = max(chunkBytes, (bloom+chunkBytes-1)&^(chunkBytes-1))
	s.bloomBits = uint64(bloom) * 8
	s.cmOff = uint64(bloom)
	total := bloom
	if counters {
		cm := max(chunkBytes, (bytes-bytes/4+chunkBytes-1)&^(chunkBytes-1))
		s.cmWidth = uint64(cm / cmRows)
		total += cm
	}
	s.b = make([]byte, total)
	return s
}

func (s *sketch) chunks() int { return len(s.b) >> chunkBits }

// fastrange maps a 32-bit hash onto [0, n) (Lemire).
func fastrange(h uint32, n uint64) uint64 { return uint64(h) * n >> 32 }

// positions fills the filter bit and counter positions of key.
func (s *sketch) positions(key int64, bits *[bloomHashes]uint64, cells *[cmRows]uint64) {
	h := sketchHash(key, s.seed)
	h1, h2 := uint32(h), uint32(h>>32)|1
	for i := range bits {
		bits[i] = fastrange(h1+uint32(i)*h2, s.bloomBits)
	}
	if s.cmWidth == 0 {
		return
	}
	g := splitmix(h)
	g1, g2 := uint32(g), uint32(g>>32)|1
	for i := range cells {
		cells[i] = s.cmOff + uint64(i)*s.cmWidth + fastrange(g1+uint32(i)*g2, s.cmWidth)
	}
}

func (s *sketch) set(i uint64, v byte) {
	if s.b[i] != v {
		s.touch(int(i >> chunkBits))
		s.b[i] = v
	}
}

func (s *sketch) estimateAt(bits *[bloomHashes]uint64, cells *[cmRows]uint64) int {
	for _, b := range bits {
		if s.b[b>>3]&(1<<(b&7)) == 0 {
			return 0
		}
	}
	if s.cmWidth == 0 {
		return 1
	}
	m := byte(255)
	for _, c := range cells {
		m = min(m, s.b[c])
	}
	return 1 + int(m)
}

// add counts c more sightings of key and returns its estimate before and
// after.
func (s *sketch) add(key int64, c int) (before, after int) {
	var bits [bloomHashes]uint64
	var cells [cmRows]uint64
	s.positions(key, &bits, &cells)
	before = s.estimateAt(&bits, &cells)
	if before == 0 {
		for _, b := range bits {
			s.set(b>>3, s.b[b>>3]|1<<(b&7))
		}
		c--
		after = 1
	}
	if s.cmWidth == 0 {
		return before, max(after, before) + c // the filter remembers one sighting, a call sees c
	}
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
	return before, s.estimateAt(&bits, &cells)
}
