package data

import (
	"hash/fnv"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readBoth reads a model's data loaded and streamed (one epoch), fails
// unless both give the same values, and returns the loaded set.
func readBoth(t *testing.T, yaml, file, content string) *Set {
	t.Helper()
	g := loadModel(t, file, content, yaml)
	set, err := Load(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := OpenStream(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	b := newBatch(g.Data, set.Rows)
	if err := fs.Fill(0, b.all); err != nil {
		t.Fatal(err)
	}
	if b.labels != nil && b.labels.DType.String() == "int32" && !slices.Equal(b.labels.I, set.Labels) {
		t.Errorf("streamed labels %v, loaded %v", b.labels.I, set.Labels)
	}
	if b.labels != nil && b.labels.DType.String() == "float32" && !slices.Equal(b.labels.F, set.Targets) {
		t.Errorf("streamed targets %v, loaded %v", b.labels.F, set.Targets)
	}
	if b.ids != nil && b.ids.I != nil && !slices.Equal(b.ids.I, set.IDs[:len(b.ids.I)]) {
		t.Errorf("streamed ids %v, loaded %v", b.ids.I, set.IDs)
	}
	return set
}

// Labels as they come: census-income's " 50000+." and " - 50000." by
// positive (a value or a list; every other value is 0), a rating by
// threshold (at least X is 1), as class ids or float targets, and a
// multi-class string label numbered by a vocabulary built from the rows
// (classes in byte order) or read from a file (its lines' order).
func TestLabelMappings(t *testing.T) {
	census := "age,income\n39, - 50000.\n52, 50000+.\n17, - 50000.\n60, 50000+.\n"
	for _, c := range []struct {
		yaml, file, content string
		labels              []int32
		targets             []float32
	}{
		{"  header: true\n  features: {name: x, column: age}\n  label: {name: y, column: income, positive: 50000+.}\n", "c.csv", census, []int32{0, 1, 0, 1}, nil},
		{"  header: true\n  features: {name: x, column: age}\n  label: {name: y, column: income, positive: [50000+., x], dtype: float32}\n", "c.csv", census, nil, []float32{0, 1, 0, 1}},
		{"  names: [user, rating]\n  features: {name: x, column: user}\n  label: {name: y, column: rating, threshold: 4}\n", "r.csv", "1,5\n2,3.5\n3,4\n4,1\n", []int32{1, 0, 1, 0}, nil},
		{"  names: [user, rating]\n  features: {name: x, column: user}\n  label: {name: y, column: rating, threshold: 4, dtype: float32}\n", "r.csv", "1,5\n2,3.5\n3,4\n4,1\n", nil, []float32{1, 0, 1, 0}},
		{"  names: [x, genre]\n  features: {name: x, column: x}\n  label: {name: y, column: genre, vocab: {min_count: 1}}\n", "g.csv", "1,Drama\n2,Comedy\n3,Action\n4,Comedy\n", []int32{2, 1, 0, 1}, nil},
	} {
		set := readBoth(t, c.yaml, c.file, c.content)
		if c.labels != nil && !slices.Equal(set.Labels, c.labels) {
			t.Errorf("%s: labels %v, want %v", c.yaml, set.Labels, c.labels)
		}
		if c.targets != nil && !slices.Equal(set.Targets, c.targets) {
			t.Errorf("%s: targets %v, want %v", c.yaml, set.Targets, c.targets)
		}
	}
	g := loadModel(t, "g.csv", "1,Drama\n2,Horror\n", "  names: [x, genre]\n  features: {name: x, column: x}\n  label: {name: y, column: genre, vocab: {min_count: 2}}\n")
	if _, err := Load(g.Data); err == nil || !strings.Contains(err.Error(), `g.csv:1: column 1 (genre): "Drama" is not a class of the label "y"'s vocabulary`) {
		t.Errorf("a class below min_count: got %v", err)
	}
	g = loadModel(t, "c.csv", census, "  header: true\n  features: {name: x, column: age}\n  label: {name: y, column: income}\n")
	if _, err := Load(g.Data); err == nil || !strings.Contains(err.Error(), `write positive: "- 50000."`) {
		t.Errorf("a string label without a mapping: got %v", err)
	}
}

// oovID is the documented id of a value out of a vocabulary of size V
// with K buckets: V + the shared-space hash (data.SharedHashID) of its
// bytes into K, written here with hash/fnv.
func oovID(v int, field string, k int) int32 {
	h := fnv.New64a()
	h.Write([]byte(field))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	hi, _ := bits.Mul64(x, uint64(k))
	return int32(v) + int32(hi)
}

// Vocabularies: a file's (one value a line, its place the id; out of it
// an OOV bucket after its words), and one built from the training rows
// (values seen at least min_count times, the most frequent first, ties in
// byte order; one per column, each column's ids after the previous
// column's, unless shared_space), max_size bounding it and placing the
// OOV buckets after it. The rows a held-out fraction takes are not
// counted. Loaded and streamed alike.
func TestVocabularies(t *testing.T) {
	dir := t.TempDir()
	voc := filepath.Join(dir, "v.txt")
	if err := os.WriteFile(voc, []byte("red\n green \nblue\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rows := "a,b\nred,x\nblue,y\npink,x\ngreen,x\nred,z\n"
	set := readBoth(t, "  header: true\n  ids: {name: c, column: a, vocab: {file: "+voc+", oov_buckets: 3}}\n", "f.csv", rows)
	if want := []int32{0, 2, oovID(3, "pink", 3), 1, 0}; !slices.Equal(set.IDs, want) {
		t.Errorf("file vocabulary: ids %v, want %v", set.IDs, want)
	}
	// built, one per column: a: red 2, blue 1, green 1, pink 1 (min_count 1)
	// -> red 0, blue 1, green 2, pink 3 then 1 OOV bucket: 5 ids; b: x 3, y 1, z 1 -> x 0, y 1, z 2 from 5
	set = readBoth(t, "  header: true\n  ids: {name: c, columns: [a, b], vocab: {min_count: 1}}\n", "b.csv", rows)
	if want := []int32{0, 5, 1, 6, 3, 5, 2, 5, 0, 7}; !slices.Equal(set.IDs, want) {
		t.Errorf("built vocabularies: ids %v, want %v", set.IDs, want)
	}
	// min_count 2: a: red; b: x. max_size 2 places the OOV bucket at 2.
	set = readBoth(t, "  header: true\n  ids: {name: c, columns: [a, b], vocab: {min_count: 2, max_size: 2, oov_buckets: 1}}\n", "m.csv", rows)
	if want := []int32{0, 3, 2, 2 + 3, 2, 3, 2, 3, 0, 5}; !slices.Equal(set.IDs, want) {
		t.Errorf("min_count 2, max_size 2: ids %v, want %v", set.IDs, want)
	}
	// shared: x 3, red 2, blue 1, green 1, pink 1, y 1, z 1 -> x 0, red 1, blue 2, green 3, pink 4, y 5, z 6
	set = readBoth(t, "  header: true\n  ids: {name: c, columns: [a, b], vocab: {min_count: 1}, shared_space: true}\n", "s.csv", rows)
	if want := []int32{1, 0, 2, 5, 4, 0, 3, 0, 1, 6}; !slices.Equal(set.IDs, want) {
		t.Errorf("shared vocabulary: ids %v, want %v", set.IDs, want)
	}
	g := loadModel(t, "z.csv", rows, "  header: true\n  ids: {name: c, column: a, vocab: {file: "+voc+", oov_buckets: 0}}\n")
	if _, err := Load(g.Data); err == nil || !strings.Contains(err.Error(), `z.csv:4: column 0 (a): "pink" is not in the vocabulary of data.ids "c"`) {
		t.Errorf("a value out of a vocabulary without OOV buckets: got %v", err)
	}
	// A held-out fraction's rows are not counted: the one row of value
	// "only-held" is held out (seed 1 holds out row 3 of 4), so it is OOV.
	g = loadModel(t, "h.csv", "v,y\nw,0\nw,1\nw,0\nonly-held,1\n", "  header: true\n  ids: {name: c, column: v, vocab: {min_count: 1}}\n  label: {name: y, column: y}\n  eval: {fraction: 0.25}\n")
	sp, err := LoadSplit(g.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	held, _ := HeldOut(4, 0.25, 1)
	if !held[3] {
		t.Skipf("seed 1 holds out %v, not row 3; the test assumes it", held)
	}
	if got := sp.Norm.Vocabs["data.ids"]; len(got) != 1 || !slices.Equal(got[0], []string{"w"}) {
		t.Errorf("vocabulary of the training rows %v, want [[w]]", got)
	}
}

// key: uint64 reads Avazu's ids, unsigned 64-bit integers, as the int64
// of their bits; key: int64 refuses them with the hint.
func TestUint64Keys(t *testing.T) {
	set := readBoth(t, "  header: true\n  ids: {name: id, column: id, key: uint64}\n", "a.csv", "id,click\n10000169349117863715,0\n1000009418151094273,1\n18446744073709551615,0\n")
	want := []int64{-8446574724591687901, 1000009418151094273, -1}
	if !slices.Equal(set.Keys, want) {
		t.Errorf("keys %v, want %v", set.Keys, want)
	}
	g := loadModel(t, "a.csv", "id\n10000169349117863715\n", "  header: true\n  ids: {name: id, column: id, key: int64}\n")
	if _, err := Load(g.Data); err == nil || !strings.Contains(err.Error(), "it is an unsigned 64-bit integer: write key: uint64") {
		t.Errorf("int64 keys of a uint64: got %v", err)
	}
}
