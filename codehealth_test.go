package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFileLines bounds a Go source file (tests aside): a file does one
// job, and one past this size is split along a seam (the trainer's setup,
// step loop and end; a data file's hashing, ids and numbers), not at an
// arbitrary line.
const maxFileLines = 700

// Every non-test Go file of the module has at most maxFileLines lines.
func TestNoSourceFileOver700Lines(t *testing.T) {
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			// another module (third_party's patched copies) is not psgraph's code
			if _, err := os.Stat(filepath.Join(path, "go.mod")); path != "." && err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		if lines := bytes.Count(src, []byte("\n")); lines > maxFileLines {
			t.Errorf("%s has %d lines, over %d: split it along a seam, one file one job", path, lines, maxFileLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("found only %d Go files: the walk is wrong", n)
	}
}
