//go:build race

package dyntable

// raceEnabled shortens the long tests under the race detector.
const raceEnabled = true
