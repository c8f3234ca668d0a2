package dsl_test

import (
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
)

// FuzzLoad feeds arbitrary bytes to LoadBytes: it must return a graph or an
// error, never panic. The seed corpus in testdata/fuzz/FuzzLoad holds the
// examples, the error cases and mutations of them. The model is placed in
// examples/, so the examples' data paths resolve.
func FuzzLoad(f *testing.F) {
	f.Fuzz(func(t *testing.T, src []byte) {
		g, err := dsl.LoadBytes("../examples/fuzz.yaml", src)
		if err != nil {
			if g != nil {
				t.Fatalf("LoadBytes returned both a graph and an error: %v", err)
			}
			msg := err.Error()
			if msg == "" {
				t.Fatal("empty error message")
			}
			for _, line := range strings.Split(msg, "\n") {
				if !strings.HasPrefix(line, "../examples/") && !strings.HasPrefix(line, "builtin:") {
					t.Fatalf("error line without the model file: %q", line)
				}
			}
			return
		}
		if g.Types == nil {
			t.Fatal("a loaded graph has no inferred types")
		}
	})
}
