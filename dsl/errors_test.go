package dsl_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// loadAll loads a model as `psgraph run` would before training: the graph,
// then its data set. A panic is returned as an error naming it.
func loadAll(path string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("PANIC: %v", r)
		}
	}()
	g, err := dsl.Load(path)
	if err != nil {
		return err
	}
	if g.Data != nil {
		if _, err := data.LoadSplit(g.Data, nil); err != nil {
			return err
		}
	}
	return nil
}

func errorCases(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "errors", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no error cases in testdata/errors: %v", err)
	}
	return files
}

// Every line of an error starts with the model file and a line:col, or
// with a data file:line followed by the model position of its column spec.
var posLine = regexp.MustCompile(`^testdata/errors/[a-z0-9_]+\.yaml:[0-9]+:[0-9]+: \S|^testdata/errors/data/[a-z]+\.(csv|tsv):[0-9]+(:[0-9]+)?: .*testdata/errors/[a-z0-9_]+\.yaml:[0-9]+:[0-9]+`)

// TestErrors loads each bad model in testdata/errors and compares the error
// text with the .err golden file beside it (go test -run TestErrors -update
// rewrites them).
func TestErrors(t *testing.T) {
	for _, file := range errorCases(t) {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			err := loadAll(file)
			if err == nil {
				t.Fatalf("%s loaded without error", file)
			}
			got := err.Error() + "\n"
			if strings.Contains(got, "PANIC") || strings.Contains(got, "goroutine") {
				t.Fatalf("loading panicked: %s", got)
			}
			for _, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
				if !posLine.MatchString(line) || !strings.Contains(line, file) {
					t.Errorf("error line lacks %s:line:col: %q", file, line)
				}
			}
			golden := strings.TrimSuffix(file, ".yaml") + ".err"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./dsl -run TestErrors -update)", err)
			}
			if got != string(want) {
				t.Errorf("error text differs from %s\n got: %s\nwant: %s", golden, got, want)
			}
		})
	}
}

// TestErrorsNeverPanic loads every error case, and every case truncated at
// each line, through LoadBytes: each must return an error or a graph, never
// panic.
func TestErrorsNeverPanic(t *testing.T) {
	for _, file := range errorCases(t) {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dsl.LoadBytes(file, src); err == nil && !strings.Contains(file, "csv_") {
			t.Errorf("%s: LoadBytes returned no error", file)
		}
		lines := strings.SplitAfter(string(src), "\n")
		for i := range lines {
			cut := strings.Join(lines[:i], "")
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s cut after %d lines: panic: %v", file, i, r)
					}
				}()
				dsl.LoadBytes(file, []byte(cut))
			}()
		}
	}
}

// Several attribute errors of one op come in file order, every time (the
// attributes are held in a map).
func TestAttrErrorsInFileOrder(t *testing.T) {
	file := filepath.Join("testdata", "errors", "attrs_file_order.yaml")
	for range 20 {
		_, err := dsl.Load(file)
		var list dsl.ErrorList
		if !errors.As(err, &list) || len(list) != 4 {
			t.Fatalf("want 4 errors, got %v", err)
		}
		for i := 1; i < len(list); i++ {
			if a, b := list[i-1].Pos, list[i].Pos; a.Line > b.Line || a.Line == b.Line && a.Col >= b.Col {
				t.Fatalf("errors out of file order:\n%v", err)
			}
		}
	}
}

// Errors that come from walking a map (an optimizer's required
// hyper-parameters) read the same on every load.
func TestMapErrorsStable(t *testing.T) {
	file := filepath.Join("testdata", "errors", "hyper_required_order.yaml")
	_, first := dsl.Load(file)
	if first == nil || strings.Count(first.Error(), "needs") != 4 {
		t.Fatalf("want the 4 missing hyper-parameters, got %v", first)
	}
	for range 20 {
		if _, err := dsl.Load(file); err == nil || err.Error() != first.Error() {
			t.Fatalf("errors differ between loads:\n%v\n---\n%v", first, err)
		}
	}
}
