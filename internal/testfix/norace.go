//go:build !race

package testfix

// Race is whether the test binary was built with the race detector (see
// race.go).
const Race = false
