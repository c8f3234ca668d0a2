package data

import "math/bits"

// The hash of hashed id fields (docs/dsl.md): the bucket of a field of
// column col (data.ids with hash_buckets) is
//
//	h = FNV-1a 64 over the 4 bytes of col (little-endian uint32), then the field's bytes
//	h ^= h >> 33; h *= 0xff51afd7ed558ccd; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53; h ^= h >> 33
//	bucket = (h * buckets) >> 64, the high 64 bits of the 128-bit product
//
// that is bucketOf(hashKey(columnHash(col), field), buckets). col is the
// field's column in the file (counting from 0), so the same string in two
// columns lands in unrelated buckets of the one shared range. The second
// line is murmur3's 64-bit finalizer: FNV-1a alone moves a key's last
// bytes into few bits of h, so keys differing in their last character
// would crowd into few buckets. After it every bit of h is mixed, and the
// multiply maps h onto the buckets without a division. The hash has no
// seed and does not depend on the Go version or the machine: a table
// trained today reads the same rows tomorrow, and any language can compute
// it (Python: (h * buckets) >> 64 with h masked to 64 bits).
//
// A spec with shared_space: true hashes without the column: FNV-1a 64
// over the field's bytes alone (hashKey(fnvOffset64, field)), so a string
// has one id in every column of every shared spec of the same buckets.
//
// A spec with key: hash64 keeps h whole, as an int64 key
// (ir.HashKey(hashKey(...)): h's bits, except 2^63, the padding key's,
// which is -2^63 + 1), so a field keeps its 64 bits and distinct strings
// collide only by chance (about K²/2^65 pairs among K strings).
//
// The row parser computes each column's state once (rowParser's seeds);
// the tests state the four cases as functions (HashID, SharedHashID,
// HashKey, SharedHashKey in hash_test.go) and check them against hash/fnv.

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// columnHash is the FNV-1a 64 state after a column's 4 bytes: the state a
// field of that column is hashed from (its hash space).
func columnHash(col int) uint64 {
	h := uint64(fnvOffset64)
	c := uint32(col)
	for i := 0; i < 4; i++ {
		h ^= uint64(byte(c >> (8 * i)))
		h *= fnvPrime64
	}
	return h
}

// hashKey is the 64-bit key of a field: FNV-1a 64 continued from state h
// (a column's, or the offset basis for a shared space) over the field's
// bytes, then murmur3's 64-bit finalizer. Every hashed id goes through
// it: a bucket is bucketOf(hashKey(...)), a 64-bit key ir.HashKey(hashKey(...)).
func hashKey(h uint64, field []byte) uint64 {
	for _, b := range field {
		h ^= uint64(b)
		h *= fnvPrime64
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// bucketOf maps a 64-bit key onto [0, buckets): the high 64 bits of the
// 128-bit product, a multiply instead of a division.
func bucketOf(h uint64, buckets int) int32 {
	hi, _ := bits.Mul64(h, uint64(buckets))
	return int32(hi)
}
