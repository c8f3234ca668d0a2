package dyntable

import (
	"fmt"
	"math"
)

// Config describes a dynamic table (one shard of it: each pserver holds a
// Table per dynamic parameter, with the same Config).
type Config struct {
	// Dim is the number of floats of a row's value; StateWidth the number
	// of floats of optimizer state beside it (0 for sgd, Dim for adagrad,
	// 2*Dim for adam, 1 for row-wise adagrad).
	Dim, StateWidth int
	// Seed and Init give a new row its values: a function of (Seed, key)
	// only (see Init).
	Seed uint64
	Init Init
	// StateInit is the initial optimizer state of a new row, one value per
	// column (nil: zeros), e.g. adagrad's initial accumulator.
	StateInit []float32
	// Default is the value read for a key without a row (nil: zeros).
	Default []float32

	// MinCount is the number of sightings a key needs before it gets a
	// row (0 or 1: the first). AdmitProb, when in (0, 1), admits a key at
	// each sighting (from the MinCount-th on) with that probability, drawn
	// from (Seed, key, sighting number). SketchBytes bounds the memory of
	// the sketch that counts sightings (0: DefaultSketchBytes), which
	// starts at 1 MiB (or the bound) and grows with the distinct keys it
	// sees (sketch.go); it exists only when MinCount > 1 or AdmitProb < 1.
	MinCount    int
	AdmitProb   float64
	SketchBytes int

	// TTL, when > 0, removes a row not seen for TTL steps: a row last
	// seen at step s is gone from step s+TTL on.
	TTL int64
	// Capacity, when > 0, bounds the live rows at each step boundary
	// (Advance): the rows Evict chooses go until at most Capacity remain.
	Capacity int
	Evict    Policy
}

// DefaultSketchBytes bounds the admission sketch's memory when the
// Config does not say: 63 MiB of generations of 1, 2, ..., 32 MiB, which
// keep the keys taken for seen before under 0.2% for about 12 million
// distinct keys with min_count 2 (TestFalseAdmissionsAtScale).
const DefaultSketchBytes = 64 << 20

// Policy is the eviction order of a table with a Capacity.
type Policy uint8

const (
	// LRU evicts the rows last seen at the oldest step, all of them,
	// oldest step first, until at most Capacity rows are live. Rows seen
	// at the current step are never evicted.
	LRU Policy = iota
	// LFU evicts the rows of lowest priority, all rows of that priority,
	// until at most Capacity rows are live. A row's priority is the
	// table's eviction watermark when it was admitted plus its sightings
	// since (at most lfuSpan above the watermark): among rows admitted
	// together the least frequently seen go first, and a row admitted
	// later starts where the evictions have reached, as in LFU with
	// dynamic aging (Arlitt et al., as Squid's heap LFUDA). It cannot be
	// combined with TTL.
	LFU
)

func (p Policy) String() string {
	switch p {
	case LRU:
		return "lru"
	case LFU:
		return "lfu"
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// Init is a new row's value, drawn for key k from a PCG stream seeded
// (Config.Seed, splitmix64(k + golden ratio)), one draw per column in
// order: the stream exec/program gives row k of a fixed table, so with
// the same seed and kind a dynamic table's key k starts as a fixed
// table's row k (TestInitMatchesFixedTable).
type Init struct {
	Kind InitKind
	// Constant: Value. Uniform: [Min, Max). Normal: Mean, Std.
	Value, Min, Max, Mean, Std float64
}

// InitKind is an initializer.
type InitKind uint8

const (
	Zeros InitKind = iota
	Constant
	Uniform
	Normal
)

func (k InitKind) String() string {
	switch k {
	case Zeros:
		return "zeros"
	case Constant:
		return "constant"
	case Uniform:
		return "uniform"
	case Normal:
		return "normal"
	}
	return fmt.Sprintf("init(%d)", uint8(k))
}

// lfuSpan bounds an LFU priority above the watermark: sightings beyond it
// are not remembered, and the eviction histogram never spans more.
const lfuSpan = 1 << 16

// maxStep is the last step a table can be advanced to (steps are kept in
// 32 bits in each row).
const maxStep = math.MaxUint32 - 1

func (c *Config) check() error {
	switch {
	case c.Dim < 1:
		return fmt.Errorf("dynamic table: dim %d: a row needs at least one float", c.Dim)
	case c.StateWidth < 0:
		return fmt.Errorf("dynamic table: optimizer state width %d is negative", c.StateWidth)
	case c.StateInit != nil && len(c.StateInit) != c.StateWidth:
		return fmt.Errorf("dynamic table: %d initial state values for %d state columns", len(c.StateInit), c.StateWidth)
	case c.Default != nil && len(c.Default) != c.Dim:
		return fmt.Errorf("dynamic table: a default row of %d values for dim %d", len(c.Default), c.Dim)
	case c.MinCount < 0 || c.MinCount > 256:
		return fmt.Errorf("dynamic table: min_count %d: the sketch counts 1 to 256 sightings", c.MinCount)
	case c.AdmitProb < 0 || c.AdmitProb > 1 || math.IsNaN(c.AdmitProb):
		return fmt.Errorf("dynamic table: admission probability %v is not in [0, 1] (0 means always)", c.AdmitProb)
	case c.SketchBytes < 0:
		return fmt.Errorf("dynamic table: sketch of %d bytes", c.SketchBytes)
	case c.TTL < 0 || c.TTL > maxStep:
		return fmt.Errorf("dynamic table: ttl_steps %d is not in [0, %d]", c.TTL, int64(maxStep))
	case c.Capacity < 0:
		return fmt.Errorf("dynamic table: capacity %d is negative", c.Capacity)
	case c.Evict != LRU && c.Evict != LFU:
		return fmt.Errorf("dynamic table: eviction %v: use lru or lfu", c.Evict)
	case c.Evict == LFU && c.Capacity == 0:
		return fmt.Errorf("dynamic table: lfu eviction needs a capacity")
	case c.Evict == LFU && c.TTL > 0:
		return fmt.Errorf("dynamic table: lfu eviction and ttl_steps cannot be combined (an lfu table counts its live rows by priority, not by step); use lru with ttl_steps")
	}
	switch c.Init.Kind {
	case Zeros, Constant, Normal:
	case Uniform:
		if !(c.Init.Min <= c.Init.Max) {
			return fmt.Errorf("dynamic table: uniform init [%v, %v) is empty", c.Init.Min, c.Init.Max)
		}
	default:
		return fmt.Errorf("dynamic table: unknown init %v", c.Init.Kind)
	}
	if c.Init.Kind == Normal && (c.Init.Std < 0 || math.IsNaN(c.Init.Std)) {
		return fmt.Errorf("dynamic table: normal init with std %v", c.Init.Std)
	}
	return nil
}

// sketchLimit is the bound of the admission sketch's memory (0: the
// table has none).
func (c *Config) sketchLimit() int {
	switch {
	case c.admitsAll():
		return 0
	case c.SketchBytes == 0:
		return DefaultSketchBytes
	}
	return c.SketchBytes
}

// admitsAll reports whether every sighting of a key admits it.
func (c *Config) admitsAll() bool {
	return c.MinCount <= 1 && (c.AdmitProb == 0 || c.AdmitProb == 1)
}

// prob is the admission probability (1 when every eligible sighting admits).
func (c *Config) prob() float64 {
	if c.AdmitProb == 0 {
		return 1
	}
	return c.AdmitProb
}
