// Package testfix holds the fixtures that tests of several packages share:
// loading a model file or bytes, and the small data sets they train on.
// It is imported by tests only.
package testfix

import (
	"testing"

	"github.com/psgraph/psgraph/dsl"
)

// Model loads the model file path or fails the test.
func Model(tb testing.TB, path string) *dsl.Graph {
	tb.Helper()
	g, err := dsl.Load(path)
	if err != nil {
		tb.Fatal(err)
	}
	return g
}
