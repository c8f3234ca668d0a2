package data

import "github.com/psgraph/psgraph/dsl/ir"

// The four hashes of hashed fields (hash.go) as functions of one field,
// as docs/dsl.md states them: the tests check them against hash/fnv and an
// independent finalizer, and the parser's ids and keys against them.

// HashID is the bucket of a field of column col of an ids spec with
// hash_buckets.
func HashID(col int, field []byte, buckets int) int32 {
	return bucketOf(hashKey(columnHash(col), field), buckets)
}

// SharedHashID is the bucket of a field of a spec with shared_space:
// true: HashID without the column.
func SharedHashID(field []byte, buckets int) int32 {
	return bucketOf(hashKey(fnvOffset64, field), buckets)
}

// HashKey is the 64-bit key of a field of column col of an ids spec with
// key: hash64: HashID's hash without the bucket map.
func HashKey(col int, field []byte) int64 {
	return ir.HashKey(hashKey(columnHash(col), field))
}

// SharedHashKey is HashKey of a spec with shared_space: true, without the
// column.
func SharedHashKey(field []byte) int64 {
	return ir.HashKey(hashKey(fnvOffset64, field))
}
