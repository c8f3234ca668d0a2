package dyntable

// The index maps a key to its slot. It is extendible hashing over
// segments of open addressing (the scheme of Go's own map since 1.24, and
// of Dash and of Fagin et al.'s extendible hashing): a directory of 2^depth
// segment pointers, picked by the top bits of the key's hash, each segment
// a linear-probing table of segSize 64-bit entries. A segment that passes
// segMax entries splits in two by its next hash bit, so the index grows
// one segment at a time: no operation ever rehashes more than segMax
// entries (a split takes about 20 µs), there is no stop-the-world rehash
// and no moment when an old and a new table of the whole index coexist.
// The directory doubles when a segment as deep as it splits; it holds one
// pointer per segment (tens of kilobytes for millions of rows).
//
// An entry is hi<<32 | (slot+1), hi the top 32 bits of the key's hash
// (0 is an empty entry). The key itself is in the row's record: a probe
// compares hi first and reads the record only on a match, and the record
// is the one Lookup touches next anyway. hi holds everything the index
// needs to move an entry: its directory bits (the top depth bits), its
// home position in a segment (the low segBits bits) and its split bit, so
// splits and deletions never read a record.
//
// Segments run between 40% and 81% full, so the index costs 10 to 20
// (typically 13) bytes per row. Deletion shifts the following entries back
// (no tombstones), so probe lengths do not degrade under eviction.

const (
	segBits  = 11
	segSize  = 1 << segBits
	segMask  = segSize - 1
	segMax   = segSize * 13 / 16
	maxDepth = 32 - segBits // directory bits and home bits must not overlap
)

type segment struct {
	e     []uint64
	n     int32
	depth uint8
}

type index struct {
	dir     []*segment
	depth   uint8
	n       int // entries
	segs    int
	scratch []uint64
	slab    slab // the segments' entries
}

func newIndex() index {
	return index{dir: []*segment{{e: make([]uint64, segSize)}}, segs: 1, scratch: make([]uint64, segSize)}
}

func (x *index) segment(hi uint32) *segment {
	return x.dir[uint64(hi)>>(32-x.depth)]
}

// find looks key (whose hash has top bits hi) up: the segment and position
// of its entry and its slot, or found false.
func (x *index) find(r *rows, key int64, hi uint32) (s *segment, pos uint32, slot int32, found bool) {
	s = x.segment(hi)
	tag := uint64(hi) << 32
	pos = hi & segMask
	for {
		e := s.e[pos]
		if e == 0 {
			return s, pos, -1, false
		}
		if e&^0xffffffff == tag {
			if slot = int32(uint32(e)) - 1; r.key(slot) == key {
				return s, pos, slot, true
			}
		}
		pos = (pos + 1) & segMask
	}
}

// probe returns the first entry from hi's home position on whose tag is
// hi's (the entry of hi's key, unless two keys share the top 32 bits of
// their hash), or 0 when an empty entry comes first. It reads no record.
func (x *index) probe(hi uint32) uint64 {
	s := x.segment(hi)
	tag := uint64(hi) << 32
	for pos := hi & segMask; ; pos = (pos + 1) & segMask {
		e := s.e[pos]
		if e == 0 || e&^0xffffffff == tag {
			return e
		}
	}
}

// insert adds an entry for a key not in the index; ok is false when the
// index cannot grow (its directory is maxDepth deep and the segment full).
func (x *index) insert(hi uint32, slot int32) bool {
	s := x.segment(hi)
	for s.n >= segMax {
		if !x.split(s, hi) {
			return false
		}
		s = x.segment(hi)
	}
	s.put(hi, slot)
	x.n++
	return true
}

func (s *segment) put(hi uint32, slot int32) {
	pos := hi & segMask
	for s.e[pos] != 0 {
		pos = (pos + 1) & segMask
	}
	s.e[pos] = uint64(hi)<<32 | uint64(uint32(slot+1))
	s.n++
}

// split divides s, the segment of hi, in two by the next bit of the hash.
func (x *index) split(s *segment, hi uint32) bool {
	if s.depth == x.depth {
		if x.depth == maxDepth {
			return false
		}
		dir := make([]*segment, 2*len(x.dir))
		for i, p := range x.dir {
			dir[2*i], dir[2*i+1] = p, p
		}
		x.dir = dir
		x.depth++
	}
	copy(x.scratch, s.e)
	clear(s.e)
	s.n = 0
	s.depth++
	ns := &segment{e: x.slab.take(segSize), depth: s.depth}
	x.segs++
	bit := uint32(1) << (32 - s.depth)
	for _, e := range x.scratch {
		if e == 0 {
			continue
		}
		h := uint32(e >> 32)
		if h&bit != 0 {
			ns.put(h, int32(uint32(e))-1)
		} else {
			s.put(h, int32(uint32(e))-1)
		}
	}
	// The directory entries of s: a run of 2^(depth-s.depth+1) starting at
	// hi's prefix; the upper half now points to ns.
	span := 1 << (x.depth - s.depth + 1)
	start := int(uint64(hi)>>(32-x.depth)) &^ (span - 1)
	for i := start + span/2; i < start+span; i++ {
		x.dir[i] = ns
	}
	return true
}

// remove deletes the entry at pos of s, shifting back the entries after it
// that probed past it.
func (x *index) remove(s *segment, pos uint32) {
	i := pos
	for j := (i + 1) & segMask; ; j = (j + 1) & segMask {
		e := s.e[j]
		if e == 0 {
			break
		}
		home := uint32(e>>32) & segMask
		// e may move to i when its home is not in (i, j] (cyclically).
		if (j-home)&segMask >= (j-i)&segMask {
			s.e[i] = e
			i = j
		}
	}
	s.e[i] = 0
	s.n--
	x.n--
}

func (x *index) bytes() int64 {
	return int64(x.segs)*segSize*8 + int64(len(x.dir))*8 + int64(len(x.scratch))*8
}
