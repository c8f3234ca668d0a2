package data

import (
	"hash/fnv"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/tensor"
)

// independentSharedHash is the documented hash of SharedHashID written
// with hash/fnv: FNV-1a 64 of the field alone, the finalizer, the
// multiply.
func independentSharedHash(field string, buckets int) int32 {
	h := fnv.New64a()
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

func TestSharedHashIDIsTheDocumentedHash(t *testing.T) {
	for _, buckets := range []int{1, 7, 1000, 1 << 20, 1<<31 - 1} {
		for _, s := range []string{"", "0", "68fd1e64", "a long item name"} {
			if got, want := SharedHashID([]byte(s), buckets), independentSharedHash(s, buckets); got != want {
				t.Fatalf("SharedHashID(%q, %d) = %d, the documented hash gives %d", s, buckets, got, want)
			}
		}
	}
}

// specsData reads two features specs and six ids specs: integer ids with
// num_ids, two hashed columns in per-column spaces and the same two in a
// shared space, a multi-valued column hashed per column and shared, and an
// integer multi-valued column with another separator.
const specsData = `  delimiter: tab
  label: {name: y, column: 0}
  features:
    - {name: d1, columns: [1, 2]}
    - {name: d2, columns: [2, 3], fill: 0, transform: log}
  ids:
    - {name: user, column: 3, num_ids: 100}
    - {name: cat, columns: [4, 6], hash_buckets: 1000}
    - {name: slots, columns: [4, 6], hash_buckets: 1000, shared_space: true}
    - {name: hist, column: 6, separator: "|", max_len: 3, hash_buckets: 5000}
    - {name: shist, column: 6, separator: "|", max_len: 3, hash_buckets: 1000, shared_space: true}
    - {name: raw, column: 7, separator: ";", max_len: 2}
`

// specsRows: row 2 has spaces around its pieces and an empty raw field,
// row 3 holds more ids than max_len in both multi-valued columns and an
// empty piece, row 4 a multi-valued field of separators only and a raw
// field with empty pieces.
var specsRows = [][]string{
	{"1", "0.5", "3", "7", "a", "b", "x|y|z", "4;5"},
	{"0", "-1", " ", "42", "b", "a", " p | q ", ""},
	{"1", "2", "9", "0", "a", "a", "a||b|c|d|e", "1;2;3"},
	{"0", "3", "0", "99", "c", " ", "|", ";8;"},
}

// specsWant computes every data variable of specsRows from the documented
// rules alone: the hashes of hash/fnv, pieces split and trimmed by hand,
// -1 padding.
func specsWant() map[string][]float64 {
	w := map[string][]float64{}
	add := func(name string, v ...float64) { w[name] = append(w[name], v...) }
	pieces := func(f string, sep string, n int) []string {
		var out []string
		for _, p := range strings.Split(f, sep) {
			if p = strings.TrimSpace(p); p != "" && len(out) < n {
				out = append(out, p)
			}
		}
		return out
	}
	pad := func(name string, ids []float64, n int) {
		for len(ids) < n {
			ids = append(ids, -1)
		}
		add(name, ids...)
	}
	for _, r := range specsRows {
		y, _ := strconv.ParseFloat(r[0], 64)
		add("y", y)
		d1, _ := strconv.ParseFloat(r[1], 64)
		add("d1", d1)
		d2, err := strconv.ParseFloat(strings.TrimSpace(r[2]), 64)
		if err != nil {
			d2 = 0 // the fill
		}
		add("d2", float64(float32(math.Log1p(d2))))
		u, _ := strconv.ParseFloat(r[3], 64)
		add("user", u)
		for col := 4; col < 6; col++ {
			add("cat", float64(independentHash(col, strings.TrimSpace(r[col]), 1000)))
		}
		for col := 4; col < 6; col++ {
			add("slots", float64(independentSharedHash(strings.TrimSpace(r[col]), 1000)))
		}
		var hist, shist, raw []float64
		for _, p := range pieces(r[6], "|", 3) {
			hist = append(hist, float64(independentHash(6, p, 5000)))
			shist = append(shist, float64(independentSharedHash(p, 1000)))
		}
		for _, p := range pieces(r[7], ";", 2) {
			v, _ := strconv.ParseFloat(p, 64)
			raw = append(raw, v)
		}
		pad("hist", hist, 3)
		pad("shist", shist, 3)
		pad("raw", raw, 2)
	}
	return w
}

func specsFile() string {
	var b strings.Builder
	for _, r := range specsRows {
		b.WriteString(strings.Join(r, "\t") + "\n")
	}
	return b.String()
}

// values reads a tensor as float64s, whatever its dtype.
func values(t *tensor.Tensor) []float64 {
	var out []float64
	for _, v := range t.F {
		out = append(out, float64(v))
	}
	for _, v := range t.I {
		out = append(out, float64(v))
	}
	return out
}

// Every spec form (several features and ids specs, integer ids with
// num_ids, per-column and shared hash spaces, multi-valued columns hashed
// or integer, padded with -1 and truncated to max_len) is read exactly as
// the documented rules say, loaded into memory and streamed alike.
func TestSpecListsReadAsDocumented(t *testing.T) {
	g := loadModel(t, "train.tsv", specsFile(), specsData)
	shapes := map[string][]int{"d1": {-1, 1}, "d2": {-1, 1}, "y": {-1}, "user": {-1, 1}, "cat": {-1, 2}, "slots": {-1, 2}, "hist": {-1, 3}, "shist": {-1, 3}, "raw": {-1, 2}}
	for name, shape := range shapes {
		if v := g.Vars[name]; v == nil || !slices.Equal([]int(v.Shape), shape) {
			t.Errorf("data variable %s: %v, want shape %v", name, v, shape)
		}
	}
	want := specsWant()
	rows := len(specsRows)
	set, err := Load(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := OpenStream(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	for _, src := range []struct {
		name string
		b    Batches
	}{{"memory", NewStream(set)}, {"stream", fs}} {
		b := newBatch(g.Data, rows)
		if err := src.b.Fill(0, b.all); err != nil {
			t.Fatal(err)
		}
		for i, c := range g.Data.Columns() {
			if got := values(b.all[i]); !slices.Equal(got, want[c.Name]) {
				t.Errorf("%s: %s = %v, want %v", src.name, c.Name, got, want[c.Name])
			}
		}
	}
	// A shared space gives one string one id in every column and every
	// shared spec of the same buckets; per-column spaces do not.
	b := newBatch(g.Data, rows)
	NewStream(set).Fill(0, b.all)
	slots, shist, cat := b.all[5].I, b.all[7].I, b.all[4].I // row 3 (index 2): "a", "a"; history "a", ...
	if slots[4] != slots[5] || slots[4] != shist[6] || cat[4] == cat[5] {
		t.Errorf(`row 3 reads "a" in columns 4, 5 and first in the history: shared ids %d %d %d (want all equal), per-column ids %d %d (want different)`, slots[4], slots[5], shist[6], cat[4], cat[5])
	}
}

// A field with more ids than max_len keeps its first max_len and is
// counted, once per field read: over the file by Load and Count, over the
// rows its batches read by a stream.
func TestTruncationIsCounted(t *testing.T) {
	g := loadModel(t, "train.tsv", specsFile(), specsData)
	want := func(what string, cut []Truncation, n int64) {
		t.Helper()
		var got []string
		for _, c := range cut {
			got = append(got, c.Spec.Name+"="+strconv.FormatInt(c.Fields, 10))
		}
		w := []string{"hist=" + strconv.FormatInt(n, 10), "shist=" + strconv.FormatInt(n, 10), "raw=" + strconv.FormatInt(n, 10)}
		if n == 0 {
			w = nil
		}
		if !slices.Equal(got, w) {
			t.Errorf("%s: truncated %v, want %v", what, got, w)
		}
	}
	set, err := Load(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	want("Load", set.Truncated(), 1)
	_, cut, err := Count(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	want("Count", cut, 1)
	fs, err := OpenStream(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	want("a stream before its first batch", fs.Truncated(), 0)
	b := newBatch(g.Data, 2)
	fs.Fill(0, b.all) // rows 1, 2
	want("a stream after rows 1-2", fs.Truncated(), 0)
	fs.Fill(2, b.all) // rows 3, 4
	want("a stream after rows 1-4", fs.Truncated(), 1)
	fs.Fill(6, b.all) // rows 3, 4 of the second epoch
	want("a stream after rows 1-4 and 3-4", fs.Truncated(), 2)
	if msg := DescribeTruncation(set.Truncated()[0]); !strings.Contains(msg, `data.ids[3] "hist" (`) || !strings.Contains(msg, "1 fields held more than max_len 3 ids; each kept its first 3") {
		t.Errorf("DescribeTruncation: %s", msg)
	}
}

// Reading batches of several specs, multi-valued columns included,
// allocates nothing per batch; a batch of the wrong number of tensors is
// an error.
func TestSpecListsStreamWithoutAllocating(t *testing.T) {
	var content strings.Builder
	for i := 0; i < 50; i++ {
		content.WriteString(specsFile())
	}
	g := loadModel(t, "train.tsv", content.String(), specsData)
	fs, err := OpenStream(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	b := newBatch(g.Data, 16)
	k := 0
	if allocs := testing.AllocsPerRun(50, func() {
		if err := fs.Fill(int64(k*16), b.all); err != nil {
			t.Fatal(err)
		}
		k++
	}); allocs != 0 {
		t.Errorf("Fill allocates %.1f times per batch, want 0", allocs)
	}
	if err := fs.Fill(0, b.all[:3]); err == nil || !strings.Contains(err.Error(), "takes 9 tensors, one per data variable") {
		t.Errorf("Fill with 3 of 9 tensors: %v", err)
	}
}

// The spec's name in messages about the data file is its place in the
// list.
func TestSpecListErrorsNameTheSpec(t *testing.T) {
	g := loadModel(t, "train.tsv", "1\t5\tx\n", "  delimiter: tab\n  ids:\n    - {name: a, column: 0}\n    - {name: b, column: 2}\n")
	_, err := Load(g.Data)
	if err == nil || !strings.Contains(err.Error(), `train.tsv:1: column 2: "x" must be a non-negative integer, because it is read as ids "b"`) || !strings.Contains(err.Error(), "add hash_buckets: N or vocab: {min_count: 1} to data.ids[1]") {
		t.Errorf("got %v", err)
	}
}

// normalize scales the columns of every features spec, each with its own
// statistics: two specs side by side read what one spec of both ranges
// reads, loaded and streamed.
func TestNormalizeSpansFeatureSpecs(t *testing.T) {
	content := "1,10,100,7\n2,30,300,8\n4,20,200,9\n"
	for _, mode := range []string{"standard", "minmax"} {
		one := loadModel(t, "d.csv", content, "  normalize: "+mode+"\n  features: {name: x, columns: [0, 3]}\n")
		two := loadModel(t, "d.csv", content, "  normalize: "+mode+"\n  features:\n    - {name: a, columns: [0, 1]}\n    - {name: b, columns: [1, 3]}\n")
		for _, stream := range []bool{false, true} {
			want := readAll(t, one.Data, stream, 3).Features
			var got []float32
			b := newBatch(two.Data, 3)
			var src Batches
			if stream {
				fs, err := OpenStream(two.Data)
				if err != nil {
					t.Fatal(err)
				}
				defer fs.Close()
				src = fs
			} else {
				set, err := Load(two.Data)
				if err != nil {
					t.Fatal(err)
				}
				src = NewStream(set)
			}
			if err := src.Fill(0, b.all); err != nil {
				t.Fatal(err)
			}
			for r := 0; r < 3; r++ {
				got = append(append(got, b.all[0].F[r]), b.all[1].F[2*r:2*r+2]...)
			}
			if !slices.Equal(got, want) || want[0] == 1 {
				t.Errorf("%s, stream %t: two specs read %v, one spec %v", mode, stream, got, want)
			}
		}
	}
}
