package data

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A LineParser makes of each line, with or without its label column, the
// values the file stream makes of it: hashed ids, filled and transformed
// features normalized with the given statistics, bit for bit. The label
// stands first (a Criteo file) or last, so leaving it out shifts every
// column in one case and none in the other.
func TestLineParserEqualsFileStream(t *testing.T) {
	const rows = 61
	criteoRows := criteoFile(t, rows, 5, false)
	var digitsRows strings.Builder
	for r := range rows {
		for c := range 5 {
			if c == 2 && r%7 == 0 {
				digitsRows.WriteString(",") // a missing value: fill
				continue
			}
			digitsRows.WriteString(strings.TrimRight(strings.TrimRight(formatFloat(float64(r*c)*0.37+float64(c)), "0"), ".") + ",")
		}
		digitsRows.WriteString([]string{"0", "1", "2"}[r%3] + "\n")
	}
	for _, c := range []struct {
		name, content, spec string
		labelAt, delim      string
	}{
		{"criteo", criteoRows, criteoSpec + "  normalize: standard\n", "first", "\t"},
		{"label-last", digitsRows.String(), "  features: {name: x, columns: [0, 5], fill: 0.5, transform: log}\n  label: {name: y, column: 5}\n  normalize: minmax\n", "last", ","},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := loadModel(t, "train.txt", c.content, c.spec)
			fs, err := OpenStream(g.Data)
			if err != nil {
				t.Fatal(err)
			}
			norm := fs.Scaling()
			fs.Close()
			if norm == nil {
				t.Fatal("the stream computed no statistics")
			}
			noLabel := *g.Data
			noLabel.Label = nil
			want := newBatch(&noLabel, rows)
			ws, err := OpenStreamScaled(&noLabel, norm)
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close()
			if err := ws.Epoch(want.all, func(n int) error { return nil }); err != nil {
				t.Fatal(err)
			}
			lp, err := NewLineParser(g.Data, norm)
			if err != nil {
				t.Fatal(err)
			}
			if lp.LabelWidth() != 1 {
				t.Fatalf("LabelWidth = %d, want 1", lp.LabelWidth())
			}
			with, without := newBatch(lp.Spec(), rows), newBatch(lp.Spec(), rows)
			lines := strings.Split(strings.TrimSuffix(c.content, "\n"), "\n")
			if len(lines) != rows {
				t.Fatalf("%d lines, want %d", len(lines), rows)
			}
			for r, line := range lines {
				if err := lp.Parse([]byte(line), r, with.all, r); err != nil {
					t.Fatal(err)
				}
				fields := strings.Split(line, c.delim)
				if c.labelAt == "first" {
					fields = fields[1:]
				} else {
					fields = fields[:len(fields)-1]
				}
				if err := lp.Parse([]byte(strings.Join(fields, c.delim)), r, without.all, r); err != nil {
					t.Fatal(err)
				}
			}
			if !with.equal(want) {
				t.Error("rows with their label parse to other values than the file stream's")
			}
			if !without.equal(want) {
				t.Error("rows without their label parse to other values than the file stream's")
			}
			// Features given as numbers: the file's values of the first row.
			if c.labelAt == "last" {
				src := make([]float64, 5)
				for j, f := range strings.Split(lines[0], ",")[:5] {
					if f == "" {
						src[j] = math.NaN()
					} else {
						src[j] = parseTestFloat(t, f)
					}
				}
				dst := make([]float32, 5)
				if err := lp.Features(0, 0, src, dst); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(dst, want.features.F[:5]) {
					t.Errorf("Features(%v) = %v, want the parsed row's %v", src, dst, want.features.F[:5])
				}
			}
		})
	}
}

// A served row's errors name the row and the column.
func TestLineParserErrorsNameRowAndColumn(t *testing.T) {
	g := loadModel(t, "train.tsv", criteoFile(t, 10, 5, false), criteoSpec)
	lp, err := NewLineParser(g.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := newBatch(lp.Spec(), 4)
	good := strings.Split(criteoFile(t, 1, 5, false), "\n")[0]
	fields := strings.Split(good, "\t")
	for _, c := range []struct {
		line string
		want []string
	}{
		{strings.Join(fields[:30], "\t"), []string{"row 3: ", "column 30 is missing", "30 fields", "reads 40", "39 without the label \"y\" (columns [0])"}},
		{strings.Join(append(slices.Clone(fields[:2]), append([]string{"x7"}, fields[3:]...)...), "\t"), []string{"row 3: ", "column 2: \"x7\" is not a number"}},
		{"  ", []string{"row 3: ", "empty"}},
	} {
		err := lp.Parse([]byte(c.line), 3, b.all, 1)
		if err == nil {
			t.Fatalf("%q parsed", c.line)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not say %q", err, w)
			}
		}
	}
	if err := lp.Parse([]byte(good), 0, b.all, 0); err != nil {
		t.Fatalf("a good row after bad ones: %v", err)
	}
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }

func parseTestFloat(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
