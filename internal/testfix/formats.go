package testfix

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// The data formats' tests read files that independent writers make (no
// psgraph code): TFRecords by testdata/formats/write_tfrecord.py (pure
// Python), Parquet by DuckDB (testdata/formats/write_parquet.mjs, npm's
// @duckdb/node-api), and look-alikes of DeepCTR's sample files by
// testdata/formats/samples.py. A test skips without the writer's tool.

// Python is the interpreter the writers run with.
const Python = "/usr/bin/python3"

// RunPython runs the Python script testdata/formats/NAME with args.
func RunPython(tb testing.TB, name string, args ...string) {
	tb.Helper()
	if _, err := os.Stat(Python); err != nil {
		tb.Skipf("%s is not installed: %v", Python, err)
	}
	out, err := exec.Command(Python, append([]string{Path("testdata/formats/" + name)}, args...)...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// WriteTFRecord runs write_tfrecord.py with args (its docstring lists them).
func WriteTFRecord(tb testing.TB, args ...string) {
	tb.Helper()
	RunPython(tb, "write_tfrecord.py", args...)
}

// DeepCTR writes look-alikes of DeepCTR's sample files into dir (their
// headers and quirks, made-up values: the data sets those samples come
// from may not be redistributed with psgraph) and returns the path of the
// one named: criteo_sample.txt, movielens_sample.txt or avazu_sample.txt.
func DeepCTR(tb testing.TB, dir, name string) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		RunPython(tb, "samples.py", dir)
	}
	return p
}

// DuckDBNode is the directory @duckdb/node-api is installed in
// (PSGRAPH_DUCKDB_NODE, or .cache/duckdb of the repository, where .ci/run
// installs it); "" when it is not, or node is missing.
func DuckDBNode() string {
	if _, err := exec.LookPath("node"); err != nil {
		return ""
	}
	for _, d := range []string{os.Getenv("PSGRAPH_DUCKDB_NODE"), Path(".cache/duckdb")} {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "node_modules", "@duckdb", "node-api")); err == nil {
			return d
		}
	}
	return ""
}

// WriteParquet has DuckDB write the rows of query to out in row groups of
// rowGroup rows; the test skips without node or the package.
func WriteParquet(tb testing.TB, out string, rowGroup int, query string) {
	tb.Helper()
	dir := DuckDBNode()
	if dir == "" {
		tb.Skip("node or @duckdb/node-api is not installed (.ci/run installs it in .cache/duckdb; or set PSGRAPH_DUCKDB_NODE)")
	}
	cmd := exec.Command("node", Path("testdata/formats/write_parquet.mjs"), out, strconv.Itoa(rowGroup), query)
	cmd.Env = append(os.Environ(), "PSGRAPH_DUCKDB_NODE="+dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("write_parquet.mjs: %v\n%s", err, b)
	}
}
