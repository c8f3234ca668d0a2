package dyntable

// Three hashes of a key, each from its own mixer and salt, so that the
// bits that pick a key's shard, its place in a shard's index and its
// counters in the admission sketch are unrelated: keys that one pserver
// holds share nothing in their index bits.

// indexHash places a key in the index: murmur3's 64-bit finalizer.
func indexHash(key int64) uint64 {
	x := uint64(key) ^ 0x2545f4914f6cdd1d
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	return x ^ x>>33
}

// splitmix is splitmix64's finalizer (Stafford's mix13). It is the mixer
// exec/program uses to give each row of a fixed table its random stream,
// and the one rowStream uses here for the same purpose.
func splitmix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// rowStream is the second PCG seed of key's row, as exec/program seeds row
// r of a fixed table (program.Initialize): a dynamic table initializes key
// r exactly as a fixed table with the same seed initializes row r.
func rowStream(key int64) uint64 { return splitmix(uint64(key) + 0x9e3779b97f4a7c15) }

// sketchHash places a key in the admission sketch (Moremur, Pelle Evensen's
// variant of the splitmix finalizer, on a salted key).
func sketchHash(key int64, seed uint64) uint64 {
	x := uint64(key) ^ seed*0x9e3779b97f4a7c15 ^ 0x6a09e667f3bcc909
	x ^= x >> 27
	x *= 0x3c79ac492ba7b653
	x ^= x >> 33
	x *= 0x1c69b3f74ac4ae35
	return x ^ x>>27
}

// admitDraw is the uniform draw in [0, 1) that decides whether key is
// admitted at its n-th sighting when admission has a probability: a pure
// function of (seed, key, n), so it does not depend on the shard, the
// order of arrival or the process.
func admitDraw(seed uint64, key int64, n int) float64 {
	h := splitmix(splitmix(seed^0xa0761d6478bd642f) ^ uint64(key)*0xe7037ed1a0b428db ^ uint64(n)*0x8ebc6af09c88c6e3)
	return float64(h>>11) / (1 << 53)
}

// ShardOf is the shard, in [0, shards), of key in a table sharded over
// shards pservers. The integration must place keys with it (or with any
// hash unrelated to the index's): a shard placed by the index's own bits
// would fill only part of each pserver's index.
func ShardOf(key int64, shards int) int {
	h := splitmix(uint64(key) ^ 0x510e527fade682d1)
	return int((h >> 32) * uint64(shards) >> 32)
}
