package data

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
)

// loadModel writes a data file and a model reading it (data section dataYAML,
// with csv: FILE prepended) and loads the model's graph.
func loadModel(t testing.TB, file, content, dataYAML string) *dsl.Graph {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	src := "psgraph: 1\ndata:\n  csv: " + file + "\n" + dataYAML
	path := filepath.Join(dir, "model.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := dsl.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// independentHash is the documented hash of HashID written with hash/fnv.
func independentHash(col int, field string, buckets int) int32 {
	h := fnv.New64a()
	var c [4]byte
	binary.LittleEndian.PutUint32(c[:], uint32(col))
	h.Write(c[:])
	h.Write([]byte(field))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	prod := new(big.Int).Mul(new(big.Int).SetUint64(x), big.NewInt(int64(buckets)))
	return int32(prod.Rsh(prod, 64).Int64())
}

func TestHashIDIsTheDocumentedHash(t *testing.T) {
	for _, buckets := range []int{1, 7, 1000, 1 << 20, 1000003, 1<<31 - 1} {
		for _, col := range []int{0, 14, 39, 300, 70000} {
			for _, s := range []string{"", "0", "68fd1e64", "ffffffff", "a long categorical value with spaces"} {
				got, want := HashID(col, []byte(s), buckets), independentHash(col, s, buckets)
				if got != want {
					t.Fatalf("HashID(%d, %q, %d) = %d, the documented hash gives %d", col, s, buckets, got, want)
				}
				if got < 0 || int(got) >= buckets {
					t.Fatalf("HashID(%d, %q, %d) = %d is outside [0, %d)", col, s, buckets, got, buckets)
				}
			}
		}
	}
}

// Keys differing only in their last hex digit, and the same keys in other
// columns, spread over the buckets, even over a power of two (where FNV-1a
// without the finalizer keeps the last byte's bits low).
func TestHashIDSpreadsSimilarKeys(t *testing.T) {
	const buckets = 16
	counts := make([]int, buckets)
	n := 0
	for col := 14; col < 40; col++ {
		for prefix := 0; prefix < 16; prefix++ {
			for last := 0; last < 16; last++ {
				counts[HashID(col, fmt.Appendf(nil, "68fd1e%x%x", prefix, last), buckets)]++
				n++
			}
		}
	}
	// Chi-square with 15 degrees of freedom: 37.7 is its 0.001 quantile.
	chi, exp := 0.0, float64(n)/buckets
	for _, c := range counts {
		chi += (float64(c) - exp) * (float64(c) - exp) / exp
	}
	if chi > 37.7 {
		t.Errorf("buckets of similar keys are uneven (chi-square %.1f > 37.7): %v", chi, counts)
	}
	same := 0
	for v := 0; v < 1000; v++ {
		k := fmt.Appendf(nil, "%08x", v)
		if HashID(14, k, 1000000) == HashID(15, k, 1000000) {
			same++
		}
	}
	if same > 2 {
		t.Errorf("%d of 1000 keys share a bucket in columns 14 and 15; columns should have their own bucket spaces", same)
	}
}

// criteoLine builds a line of the Criteo format: label, 13 ints, 26
// categoricals; "" fields are missing.
func criteoLine(label string, ints []string, cats []string) string {
	f := append([]string{label}, ints...)
	return strings.Join(append(f, cats...), "\t")
}

func fields(n int, f func(i int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

const criteoData = `  delimiter: tab
  label: {name: y, column: 0}
  features: {name: dense, columns: [1, 14], fill: -1}
  ids: {name: cat, columns: [14, 40], hash_buckets: 1000}
`

// A small file in the Criteo format: missing integers take the fill,
// missing categoricals (a trailing empty field included) hash as the empty
// string of their column, negative integers read as they are, CRLF line
// ends and blank lines are fine.
func TestCriteoFormatFillAndHash(t *testing.T) {
	ints1 := fields(13, func(i int) string { return fmt.Sprint(i * 10) })
	ints1[0], ints1[1], ints1[12] = "", "-3", ""
	cats1 := fields(26, func(i int) string { return fmt.Sprintf("%08x", 0x68fd1e00+i) })
	cats1[3], cats1[25] = "", "" // the line ends with a tab
	ints2 := fields(13, func(i int) string { return "" })
	cats2 := fields(26, func(i int) string { return "" })
	content := criteoLine("1", ints1, cats1) + "\r\n\n" + criteoLine("0", ints2, cats2) + "\n"
	g := loadModel(t, "train.tsv", content, criteoData)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%t", stream), func(t *testing.T) {
			s := readAll(t, g.Data, stream, 2)
			if s.Rows != 2 || s.NF != 13 || s.NI != 26 {
				t.Fatalf("rows %d, features %d, ids %d; want 2, 13, 26", s.Rows, s.NF, s.NI)
			}
			if s.Labels[0] != 1 || s.Labels[1] != 0 {
				t.Errorf("labels %v, want [1 0]", s.Labels)
			}
			for r, ints := range [][]string{ints1, ints2} {
				for j, f := range ints {
					want := float32(-1) // the fill
					if f != "" {
						fmt.Sscan(f, &want)
					}
					if got := s.Features[r*13+j]; got != want {
						t.Errorf("row %d feature %d (%q) = %g, want %g", r, j, f, got, want)
					}
				}
			}
			for r, cats := range [][]string{cats1, cats2} {
				for j, f := range cats {
					if got, want := s.IDs[r*26+j], independentHash(14+j, f, 1000); got != want {
						t.Errorf("row %d id %d (%q) = %d, want hash %d", r, j, f, got, want)
					}
				}
			}
		})
	}
}

// readAll reads a data set into memory, or through a FileStream (batch by
// batch, one epoch) into a Set of the same layout.
func readAll(t *testing.T, spec *dsl.Data, stream bool, rows int) *Set {
	t.Helper()
	if !stream {
		s, err := Load(spec)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	b := readStreamed(t, spec, rows)
	return b.set(rows)
}

func TestLogTransform(t *testing.T) {
	g := loadModel(t, "d.csv", "0,3,-2,\n1,0,1.5,7\n", "  label: {name: y, column: 0}\n  features: {name: x, columns: [1, 4], fill: 0, transform: log}\n")
	s, err := Load(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1.3862943611198906, -2, 0, 0, 0.9162907318741551, 2.0794415416798357} // ln(1+x) for x > 0
	for i, w := range want {
		if s.Features[i] != float32(w) {
			t.Errorf("feature %d = %g, want %g", i, s.Features[i], float32(w))
		}
	}
}

// Bad data lines are reported as file:line with what is wrong and what to
// do, whether the file is loaded or streamed.
func TestDataLineErrors(t *testing.T) {
	good := criteoLine("1", fields(13, func(int) string { return "5" }), fields(26, func(int) string { return "abcd0123" }))
	short := criteoLine("1", fields(13, func(int) string { return "5" }), fields(25, func(int) string { return "abcd0123" }))
	badInt := criteoLine("1", fields(13, func(i int) string { return map[bool]string{true: "12x", false: "5"}[i == 4] }), fields(26, func(int) string { return "abcd0123" }))
	noInt := criteoLine("1", fields(13, func(i int) string { return map[bool]string{true: "", false: "5"}[i == 6] }), fields(26, func(int) string { return "abcd0123" }))
	noLabel := criteoLine("", fields(13, func(int) string { return "5" }), fields(26, func(int) string { return "abcd0123" }))
	fracLabel := criteoLine("0.5", fields(13, func(int) string { return "5" }), fields(26, func(int) string { return "abcd0123" }))
	noFill := strings.Replace(criteoData, ", fill: -1", "", 1)
	unhashed := strings.Replace(criteoData, ", hash_buckets: 1000", "", 1)
	cases := []struct {
		name, content, data string
		want                []string
	}{
		{"wrong field count", good + "\n" + good + "\n\n" + short + "\n", criteoData,
			[]string{"train.tsv:4: line has 39 fields separated by tab, but the first row (line 1) has 40; fix the line or the delimiter (data at "}},
		{"not a number", good + "\n" + badInt + "\n", criteoData,
			[]string{`train.tsv:2: column 5: "12x" is not a number`}},
		{"empty without fill", good + "\n" + noInt + "\n", noFill,
			[]string{"train.tsv:2: column 7 is empty; add fill: VALUE to data.features (", "model.yaml:6:13) to stand in for missing values"}},
		{"empty label", noLabel + "\n", criteoData,
			[]string{`train.tsv:1: column 0 is empty, but it is the label "y" (`, "every row needs a label"}},
		{"fractional label", good + "\n" + fracLabel + "\n", criteoData,
			[]string{`train.tsv:2: column 0: "0.5" must be a non-negative integer, because it is read as label "y"`}},
		{"string ids without hash_buckets", good + "\n", unhashed,
			[]string{`train.tsv:1: column 14: "abcd0123" must be a non-negative integer, because it is read as ids "cat"`, "add hash_buckets: N or vocab: {min_count: 1} to data.ids"}},
		{"forgotten delimiter", good + "\n", strings.Replace(criteoData, "  delimiter: tab\n", "", 1), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.want == nil { // caught when the model is loaded
				dir := t.TempDir()
				os.WriteFile(filepath.Join(dir, "train.tsv"), []byte(c.content), 0o644)
				path := filepath.Join(dir, "model.yaml")
				os.WriteFile(path, []byte("psgraph: 1\ndata:\n  csv: train.tsv\n"+c.data), 0o644)
				_, err := dsl.Load(path)
				if err == nil || !strings.Contains(err.Error(), "(its lines hold tabs: add delimiter: tab to data)") {
					t.Fatalf("want a hint to add delimiter: tab, got %v", err)
				}
				return
			}
			g := loadModel(t, "train.tsv", c.content, c.data)
			for _, stream := range []bool{false, true} {
				var err error
				if stream {
					var fs *FileStream
					if fs, err = OpenStream(g.Data); err == nil {
						b := newBatch(g.Data, 8)
						err = fs.Fill(0, b.all)
						fs.Close()
					}
				} else {
					_, err = Load(g.Data)
				}
				if err == nil {
					t.Fatalf("stream=%t: no error", stream)
				}
				msg := err.Error()
				if !strings.HasPrefix(msg, g.Data.CSV+":") {
					t.Errorf("stream=%t: error does not start with the data file: %s", stream, msg)
				}
				for _, w := range c.want {
					if !strings.Contains(msg, w) {
						t.Errorf("stream=%t: error lacks %q:\n%s", stream, w, msg)
					}
				}
			}
		})
	}
}

// Fields are trimmed of spaces, except a delimiter: a comma file may pad
// its fields, and a tab file's empty last field survives.
func TestTrimKeepsDelimiter(t *testing.T) {
	g := loadModel(t, "d.txt", " 1 ; 2.5 ;7 \n0;;\t\n", "  delimiter: \";\"\n  label: {name: y, column: 0}\n  features: {name: x, columns: [1, 2], fill: 9}\n  ids: {name: i, columns: [2, 3], hash_buckets: 50}\n")
	s, err := Load(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	if s.Labels[0] != 1 || s.Features[0] != 2.5 || s.Features[1] != 9 || s.IDs[0] != HashID(2, []byte("7"), 50) || s.IDs[1] != HashID(2, nil, 50) {
		t.Errorf("got labels %v features %v ids %v", s.Labels, s.Features, s.IDs)
	}
}

// Unhashed ids take their fill; a file without rows is an error, loaded
// or streamed.
func TestIDFillAndEmptyFile(t *testing.T) {
	g := loadModel(t, "d.csv", "1,4\n0,\n", "  label: {name: y, column: 0}\n  ids: {name: i, columns: [1, 2], fill: 3}\n")
	s, err := Load(g.Data)
	if err != nil || !slices.Equal(s.IDs, []int32{4, 3}) {
		t.Fatalf("ids %v, %v; want [4 3]", s.IDs, err)
	}
	empty := loadModel(t, "e.csv", "\n  \n", "  label: {name: y, column: 0}\n")
	if _, err := Load(empty.Data); err == nil || !strings.Contains(err.Error(), "e.csv: the data file has no rows") {
		t.Errorf("Load of a blank file: %v", err)
	}
	if _, err := OpenStream(empty.Data); err == nil || !strings.Contains(err.Error(), "e.csv: the data file has no rows") {
		t.Errorf("OpenStream of a blank file: %v", err)
	}
}
