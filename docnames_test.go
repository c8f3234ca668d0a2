package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// testName matches a Go test, benchmark or fuzz function's name as the
// docs cite it (with or without backquotes, possibly with a /subtest, or
// followed by * for every test of that prefix).
var testName = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*`)

// testFunc matches the declaration of one in a _test.go file.
var testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*)\(`)

// Every test, benchmark or fuzz target that README.md, docs/, examples/,
// bench/, .ci/ and the Go code's comments name as the evidence of a
// sentence exists: a renamed or deleted test must take its citations with
// it, or the sentence it backed is left standing on nothing.
func TestDocsNameExistingTests(t *testing.T) {
	have := map[string]bool{}
	var goFiles []string // their comments cite tests too
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		goFiles = append(goFiles, path)
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllSubmatch(src, -1) {
			have[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(have) < 100 {
		t.Fatalf("found only %d test functions: the walk is wrong", len(have))
	}
	var docs []string
	for _, pattern := range []string{"README.md", "docs/*.md", "examples/*.md", "bench/*.sh", "bench/*.py", ".ci/*"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, m...)
	}
	docs = append(docs, goFiles...)
	cited := 0
	for _, path := range docs {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			for _, at := range testName.FindAllStringIndex(line, -1) {
				name := line[at[0]:at[1]]
				cited++
				found := have[name]
				if !found && strings.HasPrefix(line[at[1]:], "*") { // TestSyncEqualsLocal*: a family
					for h := range have {
						found = found || strings.HasPrefix(h, name)
					}
				}
				if !found {
					t.Errorf("%s:%d names %s, which no _test.go declares: name the test that shows the sentence now, or drop the sentence", path, i+1, name)
				}
			}
		}
	}
	if cited < 100 {
		t.Fatalf("found only %d citations in %d files: the scan is wrong", cited, len(docs))
	}
}
