package cmd_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/internal/testfix"
)

func writeCTRModels(t *testing.T, dir string) (mem, stream string) {
	t.Helper()
	mem, stream = filepath.Join(dir, "ctr.yaml"), filepath.Join(dir, "ctr-stream.yaml")
	for path, s := range map[string]bool{mem: false, stream: true} {
		if err := os.WriteFile(path, []byte(testfix.CTRModel(1000, 64, 300, s)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return mem, stream
}

// psgraph gen criteo writes a file that psgraph run trains a CTR model on,
// loaded or streamed, to a loss below the entropy of the click rate (what
// predicting the rate alone scores), with the same summary either way.
func TestGenCriteoThenRunCTR(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "train.tsv")
	r := psgraph(t, "gen", "criteo", "-o", file, "--rows", "2000", "--seed", "3", "--vocab", "200")
	if r.code != 0 || !strings.Contains(r.stdout, "wrote 2000 rows to "+file) {
		t.Fatalf("gen: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(src), "\n"), "\n")
	clicks := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "1\t") {
			clicks++
		}
	}
	p := float64(clicks) / float64(len(lines))
	entropy := -(p*math.Log(p) + (1-p)*math.Log(1-p))

	mem, stream := writeCTRModels(t, dir)
	if r := psgraph(t, "check", stream); r.code != 0 || !strings.Contains(r.stdout, "data (2000 rows): dense float32[batch, 13], y int32[batch], cat int32[batch, 26]") {
		t.Fatalf("check: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var sums [2]struct {
		Loss float64
		Acc  float64
	}
	for i, model := range []string{mem, stream} {
		r := psgraph(t, "run", "--role", "local", "--log-format", "json", "--final-pass", model)
		if r.code != 0 {
			t.Fatalf("run %s: exit %d\n%s", model, r.code, r.stderr)
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &sums[i]); err != nil {
			t.Fatalf("run %s: summary %q: %v", model, r.stdout, err)
		}
	}
	t.Logf("click rate %.3f, its entropy %.4f; loss in memory %.4f, streamed %.4f", p, entropy, sums[0].Loss, sums[1].Loss)
	if sums[0] != sums[1] {
		t.Errorf("in memory %+v, streamed %+v: the same batches should give the same summary", sums[0], sums[1])
	}
	if !(sums[1].Loss < entropy-0.03) {
		t.Errorf("loss %.4f is not below the click rate's entropy %.4f: the model learned nothing from the ids", sums[1].Loss, entropy)
	}
}

func TestGenUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "x.tsv")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"gen"}, "gen needs a data set"},
		{[]string{"gen", "criterion"}, `no data set "criterion"; data sets: criteo`},
		{[]string{"gen", "criteo", "--rows", "10"}, "needs -o FILE"},
		{[]string{"gen", "criteo", "-o", out}, "--rows must be positive"},
		{[]string{"gen", "criteo", "-o", out, "--rows", "10", "--zipf", "0.9"}, "--zipf (the exponent of the ids' distribution) must be a number > 1"},
		{[]string{"gen", "criteo", "-o", out, "--rows", "10", "--truth", "deep"}, `--truth must be linear or fm, got "deep"`},
		{[]string{"gen", "criteo", "-o", out, "--rows", "10", "--history", "-2"}, "--history (the most ids of the history column) must be in [0, 1000], got -2"},
		{[]string{"gen", "criteo", "-o", out, "--rows", "10", "--drift", "-1"}, "--drift (the share of the vocabulary its window slides by over the file) must be >= 0"},
		{[]string{"gen", "criteo", "-o", out, "--rows", "10", "--truth", "fm", "--interaction", "0"}, "--interaction (the factor of the fm truth's pairwise term) must be a number > 0, got 0"},
		{[]string{"gen", "criteo", "-o", out, "--rows", "10", "--interaction", "2"}, "--interaction scales the pairwise term of truth fm; truth is linear: set truth fm too"},
	} {
		r := psgraph(t, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("psgraph %v: exit %d, want 2 and %q in:\n%s", c.args, r.code, c.want, r.stderr)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed gen left a file behind")
	}
}

// A bad line deep in a streamed file stops the run with file:line and
// exit code 1, in the step that reads it.
func TestStreamedBadLineExits1(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "train.tsv")
	if r := psgraph(t, "gen", "criteo", "-o", file, "--rows", "500"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	src, _ := os.ReadFile(file)
	lines := strings.SplitAfter(string(src), "\n")
	lines[300] = "1\t2\t3\n"
	os.WriteFile(file, []byte(strings.Join(lines, "")), 0o644)
	_, stream := writeCTRModels(t, dir)
	noNorm := strings.Replace(stream, ".yaml", "-raw.yaml", 1)
	y, _ := os.ReadFile(stream)
	os.WriteFile(noNorm, []byte(strings.Replace(string(y), "  normalize: standard\n", "", 1)), 0o644)
	for _, model := range []string{stream, noNorm} { // normalize reads the whole file first
		r := psgraph(t, "run", "--role", "local", model)
		badInput{"", file + ":301: line has 3 fields separated by tab, but the first row (line 1) has 40"}.check(t, r)
	}
}
