package data

import (
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
)

// targetsCSV: a header, three feature columns, and two float target
// columns (3 and 4) whose values normalization would visibly change.
const targetsCSV = "a,b,c,t1,t2\n" +
	"1,10,100,0.5,-3\n" +
	"2,20,300,1.5,7.25\n" +
	"\n" +
	"4,40,200,-2,100\n" +
	"3,30,400,8,0\n"

var wantTargets = []float32{0.5, -3, 1.5, 7.25, -2, 100, 8, 0}

// Labels are never normalized: with normalize: standard or minmax the
// float targets are the file's values, in memory and streamed, even when
// their columns are also read as features (the old workaround of a target
// inside features, which normalize scaled with them).
func TestFloatLabelNeverNormalized(t *testing.T) {
	for _, mode := range []string{"standard", "minmax"} {
		for _, features := range []string{"[a, b, c]", "[0, 5]"} {
			g := loadModel(t, "d.csv", targetsCSV, "  header: true\n  normalize: "+mode+"\n  features: {name: x, columns: "+features+"}\n  label: {name: y, columns: [t1, t2], dtype: float32}\n")
			for _, stream := range []bool{false, true} {
				s := readAll(t, g.Data, stream, 4)
				if s.NT != 2 || !slices.Equal(s.Targets, wantTargets) {
					t.Errorf("%s, features %s, stream %v: targets %v (NT %d), want the file's %v", mode, features, stream, s.Targets, s.NT, wantTargets)
				}
				// The features were normalized: column 0 is 1, 2, 4, 3.
				x0 := []float64{float64(s.Features[0]), float64(s.Features[s.NF]), float64(s.Features[2*s.NF]), float64(s.Features[3*s.NF])}
				want := []float64{1, 2, 4, 3}
				for i := range want {
					if mode == "standard" {
						want[i] = (want[i] - 2.5) / math.Sqrt(1.25)
					} else {
						want[i] = (want[i] - 1) / 3
					}
					if math.Abs(x0[i]-want[i]) > 1e-6 {
						t.Errorf("%s, stream %v: feature 0 of row %d is %g, want %g", mode, stream, i, x0[i], want[i])
					}
				}
			}
		}
	}
}

// A header line is not a row: Load, the stream and Rows skip it.
func TestHeaderIsNotARow(t *testing.T) {
	g := loadModel(t, "d.csv", targetsCSV, "  header: true\n  features: {name: x, columns: [a, b, c]}\n  label: {name: y, column: t1, dtype: float32}\n")
	if n, err := Rows(g.Data); err != nil || n != 4 {
		t.Errorf("Rows = %d, %v; want 4", n, err)
	}
	mem := readAll(t, g.Data, false, 4)
	if mem.Rows != 4 || !slices.Equal(mem.Targets, []float32{0.5, 1.5, -2, 8}) || mem.Features[0] != 1 || mem.Features[1] != 10 {
		t.Errorf("loaded %d rows, targets %v, features %v", mem.Rows, mem.Targets, mem.Features)
	}
	// Two epochs of the stream: the rewind skips the header again.
	fs, err := OpenStream(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	b := newBatch(g.Data, 6)
	if err := fs.Fill(3, b.all); err != nil {
		t.Fatal(err)
	}
	if want := []float32{8, 0.5, 1.5, -2, 8, 0.5}; !slices.Equal(b.labels.F, want) {
		t.Errorf("stream rows 3..8: targets %v, want %v", b.labels.F, want)
	}
	if c, _, err := Count(g.Data); err != nil || c != 4 {
		t.Errorf("Count = %d, %v; want 4", c, err)
	}
}

func TestHeaderAndFloatLabelLineErrors(t *testing.T) {
	for _, c := range []struct{ csv, want string }{
		{"a,b,c\n1,2,x\n", `d.csv:2: column 2 (c): "x" is not a number, but it is the label "y"`},
		{"a,b,c\n1,2,\n", `d.csv:2: column 2 (c) is empty, but it is the label "y"`},
		{"a,b,c\n1,2,3,4\n", "d.csv:2: line has 4 fields separated by \",\", but the header (line 1) has 3"},
	} {
		g := loadModel(t, "d.csv", c.csv, "  header: true\n  features: {name: x, columns: [a, b]}\n  label: {name: y, column: c, dtype: float32}\n")
		for _, stream := range []bool{false, true} {
			var err error
			if stream {
				var fs *FileStream
				if fs, err = OpenStream(g.Data); err == nil {
					b := newBatch(g.Data, 1)
					err = fs.Fill(0, b.all)
					fs.Close()
				}
			} else {
				_, err = Load(g.Data)
			}
			if err == nil || !contains(err.Error(), c.want) {
				t.Errorf("%q stream %v: got %v, want %q", c.csv, stream, err, c.want)
			}
		}
	}
	// Without header: true, a header line is reported as one.
	g := loadModel(t, "d.csv", "1,2,3\n", "  features: {name: x, columns: [0, 2]}\n  label: {name: y, column: 2, dtype: float32}\n")
	if err := writeFile(g.Data.CSV, "a,b,c\n1,2,3\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(g.Data); err == nil || !contains(err.Error(), `d.csv:1: column 0: "a" is not a number (is it a header line? add header: true to data`) {
		t.Errorf("a header without header: true: %v", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }

// A synthetic label with dtype: float32 is the class as a float target
// [rows, 1]: the same rows as the int32 class ids.
func TestSyntheticFloatLabel(t *testing.T) {
	load := func(label string) *Set {
		g, err := dsl.LoadBytes("m.yaml", []byte("psgraph: 1\ndata:\n  synthetic: {rows: 50, features: 3, classes: 2, seed: 4}\n  features: {name: x}\n  label: "+label+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		s, err := Load(g.Data)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ids, tgt := load("{name: y}"), load("{name: y, dtype: float32}")
	if tgt.NT != 1 || len(tgt.Targets) != 50 || tgt.Labels != nil {
		t.Fatalf("float synthetic label: NT %d, %d targets, %d class ids", tgt.NT, len(tgt.Targets), len(tgt.Labels))
	}
	ones := 0
	for i, l := range ids.Labels {
		if tgt.Targets[i] != float32(l) {
			t.Fatalf("row %d: target %g, class %d", i, tgt.Targets[i], l)
		}
		ones += int(l)
	}
	if ones == 0 || ones == 50 {
		t.Fatalf("the synthetic task has one class only (%d ones)", ones)
	}
}
