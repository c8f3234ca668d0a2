// Package dyntable is the storage engine of psgraph's dynamic embedding
// tables: one pserver's shard of a table whose rows are created when a
// 64-bit feature key is admitted and removed when it expires or is
// evicted, so memory follows the live keys.
package dyntable
