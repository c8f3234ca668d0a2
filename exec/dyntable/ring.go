package dyntable

import "math/bits"

// ring counts the live rows by score for the scores (w, w+len(c)]: a
// power-of-two ring of counters indexed by score, growing when a score
// falls beyond it. With it Advance knows how many rows each raise of the
// watermark kills without visiting them. Its span is at most TTL steps
// (with a TTL), lfuSpan (LFU), or the steps back to the oldest live row
// (LRU without TTL); 4 bytes a score.
type ring struct {
	c      []int32
	lo, hi int64 // scores counted are in [lo, hi)
}

func (r *ring) init(lo int64) {
	r.c = make([]int32, 64)
	r.lo, r.hi = lo, lo
}

func (r *ring) add(score int64, d int32) {
	if score-r.lo >= int64(len(r.c)) {
		r.grow(score - r.lo + 1)
	}
	r.c[score&int64(len(r.c)-1)] += d
	if score >= r.hi {
		r.hi = score + 1
	}
}

func (r *ring) grow(span int64) {
	n := 1 << bits.Len64(uint64(span-1))
	c := make([]int32, n)
	for s := r.lo; s < r.hi; s++ {
		c[s&int64(n-1)] = r.c[s&int64(len(r.c)-1)]
	}
	r.c = c
}

// drop zeroes the counts of scores <= to and returns their sum.
func (r *ring) drop(to int64) int64 {
	var n int64
	for s := r.lo; s <= to && s < r.hi; s++ {
		i := s & int64(len(r.c)-1)
		n += int64(r.c[i])
		r.c[i] = 0
	}
	r.lo = max(r.lo, to+1)
	r.hi = max(r.hi, r.lo)
	return n
}

func (r *ring) bytes() int64 { return int64(len(r.c)) * 4 }

// bitset is a set of slots (or sketch chunks).
type bitset []uint64

func (b *bitset) grow(n int) {
	if w := (n + 63) / 64; w > len(*b) {
		*b = append(*b, make([]uint64, w-len(*b)+w/4)...)
	}
}

func (b bitset) set(i int32)      { b[i>>6] |= 1 << (i & 63) }
func (b bitset) has(i int32) bool { return int(i>>6) < len(b) && b[i>>6]&(1<<(i&63)) != 0 }

// or adds the members of o.
func (b *bitset) or(o bitset) {
	b.grow(len(o) * 64)
	for i, w := range o {
		(*b)[i] |= w
	}
}
