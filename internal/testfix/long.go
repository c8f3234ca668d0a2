package testfix

import (
	"flag"
	"testing"
)

// long is -long: run the tests too slow for a developer's `go test ./...`
// (soaks, scale runs, learning runs of hundreds of steps). .ci/run runs
// them in a go test line of their own.
var long = flag.Bool("long", false, "run the long tests (soaks, scale runs; .ci/run passes it)")

// Long skips tb unless the tests run with -long (after the packages:
// go test ./cmd -long). Call it first in a test
// whose claim needs minutes or a scale a quick run cannot give.
func Long(tb testing.TB) {
	tb.Helper()
	if !*long {
		tb.Skip("a long test: run with -long (.ci/run does)")
	}
}

// IsLong reports whether the tests run with -long: a test whose claim
// holds at a small size runs at the size its docs cite with it.
func IsLong() bool { return *long }
