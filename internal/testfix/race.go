//go:build race

package testfix

// Race is whether the test binary was built with the race detector: it
// runs code 5-20x slower, and its sync.Pool drops items at random (to
// find misuse), so allocation bounds and long runs do not hold under it.
const Race = true
