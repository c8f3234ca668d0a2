package testfix

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Scenarios runs the data-driven scenarios of the files glob matches, one
// subtest a file, in the manner of etcd-io/raft's testdata: each block is
// a command line, a line "----" and the lines the command answers, blocks
// apart by blank lines, "#" lines comments. run is made once a file (the
// state of its scenario) and answers each command; with update the files
// are rewritten with the answers got (review the diff), else each answer
// must be the block's.
func Scenarios(t *testing.T, glob string, update bool, newRun func() func(t *testing.T, cmd string) string) {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in %s: %v", glob, err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { scenario(t, f, update, newRun()) })
	}
}

func scenario(t *testing.T, path string, update bool, run func(t *testing.T, cmd string) string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "#") {
			out = append(out, lines[i])
			continue
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "----" {
			t.Fatalf("%s:%d: %q is not followed by ----", path, i+1, l)
		}
		cmd := lines[i]
		i += 2
		var want []string
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			want = append(want, lines[i])
		}
		got := run(t, l)
		if !update && got != strings.Join(want, "\n") {
			t.Errorf("%s: %s\n got:\n%s\nwant:\n%s", path, l, got, strings.Join(want, "\n"))
		}
		out = append(out, cmd, "----", got, "")
	}
	if update {
		s := strings.TrimRight(strings.Join(out, "\n"), "\n") + "\n"
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
