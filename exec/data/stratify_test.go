package data

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A stratified held-out fraction holds out each class's share of the
// rows whatever the seed: 20% of 200 rows with 12 positives is 40 rows, 2
// of them positive (12 x 40 / 200 = 2.4; the negatives' 37.6 has the
// larger fractional part, so they get the remaining row), where the plain
// draw holds out none for some seeds (the data shows it, for the test to
// mean anything). The split is drawn by eval.seed when given (data.seed
// then leaves it alone), and a loaded split (with a vocabulary built from
// the training rows, which reads the labels first) holds out the rows
// HeldOutStratified says.
func TestStratifiedHeldOutKeepsClassShares(t *testing.T) {
	labels := make([]int32, 200)
	for i := range labels {
		if i%17 == 3 { // 12 positives
			labels[i] = 1
		}
	}
	pos := func(held []bool) (n, p int) {
		for i, h := range held {
			if h {
				n++
				p += int(labels[i])
			}
		}
		return n, p
	}
	none := false
	for seed := uint64(0); seed < 300; seed++ {
		st, err := HeldOutStratified(labels, 0.2, seed)
		if err != nil {
			t.Fatal(err)
		}
		if n, p := pos(st); n != 40 || p != 2 {
			t.Fatalf("seed %d: stratified holds out %d rows, %d positive; want 40 and 2", seed, n, p)
		}
		plain, _ := HeldOut(200, 0.2, seed)
		if _, p := pos(plain); p == 0 {
			none = true
		}
	}
	if !none {
		t.Fatal("no seed of the plain draw holds out no positive: the data does not show the need")
	}

	dir := t.TempDir()
	var csv strings.Builder
	for i, l := range labels {
		fmt.Fprintf(&csv, "%d,%d,c%d\n", l, i, i%7)
	}
	if err := os.WriteFile(filepath.Join(dir, "d.csv"), []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	load := func(seeds string) *Split {
		t.Helper()
		spec := loadSpec(t, dir, "  csv: d.csv\n  names: [y, i, c]\n  label: {name: y, column: y}\n  features: {name: x, column: i}\n"+
			"  ids: {name: c, column: c, vocab: {min_count: 1}}\n"+seeds)
		sp, err := LoadSplit(spec, nil)
		if err != nil {
			t.Fatal(err)
		}
		return sp
	}
	a := load("  seed: 5\n  eval: {fraction: 0.2, stratify: true, seed: 9}\n")
	b := load("  seed: 6\n  eval: {fraction: 0.2, stratify: true, seed: 9}\n")
	if a.Eval.Rows != 40 || slices.Index(a.Eval.Labels, 1) < 0 || !slices.Equal(a.Eval.Features, b.Eval.Features) {
		t.Errorf("held-out rows %d (positives at %d); the same rows with another data.seed: %v", a.Eval.Rows, slices.Index(a.Eval.Labels, 1), slices.Equal(a.Eval.Features, b.Eval.Features))
	}
	want, _ := HeldOutStratified(labels, 0.2, 9)
	var rows []float32
	for i, h := range want {
		if h {
			rows = append(rows, float32(i))
		}
	}
	if !slices.Equal(a.Eval.Features, rows) {
		t.Errorf("held-out rows %v, HeldOutStratified's %v", a.Eval.Features, rows)
	}
}
