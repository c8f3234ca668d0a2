// Package slab hands out many small slices (and single values) from a
// few larger allocations: the graph passes of a model of 100k ops build
// hundreds of thousands of ops, variables and name lists, and one
// allocation each made them a large share of split's time
// (docs/split.md, Cost).
package slab
