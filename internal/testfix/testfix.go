// Package testfix holds the fixtures that tests of several packages share:
// loading a model file or bytes, and the small data sets they train on.
// It is imported by tests only.
package testfix

import (
	"os"
	"path/filepath"
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

// ModelWith loads the model src from a new temporary directory holding
// files (a name's contents) beside it, such as the data it reads.
func ModelWith(tb testing.TB, src string, files map[string][]byte) *dsl.Graph {
	tb.Helper()
	dir := tb.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	path := filepath.Join(dir, "model.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		tb.Fatal(err)
	}
	return Model(tb, path)
}
