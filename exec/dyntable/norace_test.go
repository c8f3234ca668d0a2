//go:build !race

package dyntable

const raceEnabled = false
