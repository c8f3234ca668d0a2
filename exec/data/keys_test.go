package data

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/tensor"
)

// independentKey is the documented 64-bit key (docs/dsl.md, "64-bit
// keys") written with hash/fnv: FNV-1a 64 over the column's 4 bytes
// (unless shared) and the field, the finalizer, the bits as an int64, and
// 2^63 moved to -2^63 + 1.
func independentKey(col int, shared bool, field string) int64 {
	h := fnv.New64a()
	if !shared {
		var c [4]byte
		binary.LittleEndian.PutUint32(c[:], uint32(col))
		h.Write(c[:])
	}
	h.Write([]byte(field))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	if x == 1<<63 {
		return math.MinInt64 + 1
	}
	return int64(x)
}

func TestHashKeyIsTheDocumentedHash(t *testing.T) {
	neg := 0
	for _, col := range []int{0, 14, 39, 300, 70000} {
		for _, s := range []string{"", "0", "68fd1e64", "68fd1e65", "ffffffff", "a long categorical value with spaces"} {
			if got, want := HashKey(col, []byte(s)), independentKey(col, false, s); got != want {
				t.Fatalf("HashKey(%d, %q) = %d, the documented hash gives %d", col, s, got, want)
			}
			if got, want := SharedHashKey([]byte(s)), independentKey(col, true, s); got != want {
				t.Fatalf("SharedHashKey(%q) = %d, the documented hash gives %d", s, got, want)
			}
			if HashKey(col, []byte(s)) < 0 {
				neg++
			}
		}
	}
	// The key is the whole hash, both halves of the range: the bucket map
	// of HashID is the same hash's high bits.
	if neg == 0 || neg == 30 {
		t.Errorf("%d of 30 keys are negative; a 64-bit hash read as int64 has both signs", neg)
	}
	for _, f := range []string{"68fd1e64", "", "x"} {
		k, id := HashKey(14, []byte(f)), HashID(14, []byte(f), 1<<31-1)
		if hi, _ := bits.Mul64(uint64(k), 1<<31-1); int32(hi) != id {
			t.Errorf("HashID(14, %q) = %d is not the bucket of HashKey's hash %d", f, id, k)
		}
	}
}

// keysData reads int64 keys in every form: hashed per column and in a
// shared space, integers of the whole range with a fill, and multi-valued
// columns of hashed keys (shared) and of integers, beside int32 ids.
const keysData = `  delimiter: tab
  label: {name: y, column: 0}
  ids:
    - {name: cat, columns: [1, 3], hash_buckets: 1000}
    - {name: k, columns: [1, 3], key: hash64}
    - {name: sk, columns: [1, 3], key: hash64, shared_space: true}
    - {name: uid, column: 3, key: int64, fill: -7}
    - {name: hist, column: 4, separator: "|", max_len: 3, key: hash64, shared_space: true}
    - {name: raw, column: 5, separator: ";", max_len: 2, key: int64}
`

var keysRows = [][]string{
	{"1", "a", "b", "9223372036854775807", "a|b|c", "-9223372036854775807;0"},
	{"0", "b", " ", "", " p | q ", ""},
	{"1", "a", "a", "-1", "a||b|c|d", "1;2;3"},
	{"0", " ", "c", "+42", "|", ";8;"},
}

func keysFile() string {
	var b strings.Builder
	for _, r := range keysRows {
		b.WriteString(strings.Join(r, "\t") + "\n")
	}
	return b.String()
}

// keysWant computes the int64 variables of keysRows from the documented
// rules alone: hash/fnv, pieces split and trimmed by hand, strconv for
// integers, math.MinInt64 padding.
func keysWant() map[string][]int64 {
	w := map[string][]int64{}
	pieces := func(f, sep string, n int) []string {
		var out []string
		for _, p := range strings.Split(f, sep) {
			if p = strings.TrimSpace(p); p != "" && len(out) < n {
				out = append(out, p)
			}
		}
		return out
	}
	for _, r := range keysRows {
		for col := 1; col < 3; col++ {
			w["k"] = append(w["k"], independentKey(col, false, strings.TrimSpace(r[col])))
			w["sk"] = append(w["sk"], independentKey(col, true, strings.TrimSpace(r[col])))
		}
		uid := int64(-7)
		if r[3] != "" {
			uid, _ = strconv.ParseInt(r[3], 10, 64)
		}
		w["uid"] = append(w["uid"], uid)
		hist := []int64{math.MinInt64, math.MinInt64, math.MinInt64}
		for i, p := range pieces(r[4], "|", 3) {
			hist[i] = independentKey(4, true, p)
		}
		w["hist"] = append(w["hist"], hist...)
		raw := []int64{math.MinInt64, math.MinInt64}
		for i, p := range pieces(r[5], ";", 2) {
			raw[i], _ = strconv.ParseInt(p, 10, 64)
		}
		w["raw"] = append(w["raw"], raw...)
	}
	return w
}

// Every form of 64-bit keys is read as documented, loaded and streamed
// alike, into int64 variables beside the int32 ids and the label.
func TestKeySpecsReadAsDocumented(t *testing.T) {
	g := loadModel(t, "train.tsv", keysFile(), keysData)
	for name, want := range map[string]string{"y": "int32[batch]", "cat": "int32[batch, 2]", "k": "int64[batch, 2]", "sk": "int64[batch, 2]", "uid": "int64[batch, 1]", "hist": "int64[batch, 3]", "raw": "int64[batch, 2]"} {
		if v := g.Vars[name]; v == nil || v.DType.String()+v.Shape.String() != want {
			t.Errorf("data variable %s: %v, want %s", name, v, want)
		}
	}
	want := keysWant()
	rows := len(keysRows)
	set, err := Load(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	if set.NK != 10 || set.NI != 2 || len(set.Keys) != 10*rows {
		t.Fatalf("the set holds %d keys and %d ids a row (%d keys), want 10 and 2", set.NK, set.NI, len(set.Keys))
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
			tt := b.all[i]
			switch {
			case want[c.Name] != nil:
				if tt.DType != tensor.I64 || !slices.Equal(tt.L, want[c.Name]) {
					t.Errorf("%s: %s = %v %v, want int64 %v", src.name, c.Name, tt.DType, tt.L, want[c.Name])
				}
			case c.Name == "cat":
				for r := range rows {
					for j := range 2 {
						if got, w := tt.I[2*r+j], independentHash(1+j, strings.TrimSpace(keysRows[r][1+j]), 1000); got != w {
							t.Errorf("%s: cat[%d, %d] = %d, want %d", src.name, r, j, got, w)
						}
					}
				}
			}
		}
	}
	// One string is one key in every column and every spec of the shared
	// space, and two keys in per-column spaces; a 64-bit key is the whole
	// hash behind the spec's bucketed id of the same column.
	b := newBatch(g.Data, rows)
	NewStream(set).Fill(0, b.all)
	k, sk, hist := b.all[2].L, b.all[3].L, b.all[5].L // row 3 (index 2): "a", "a"; history "a", ...
	if sk[4] != sk[5] || sk[4] != hist[6] || k[4] == k[5] {
		t.Errorf(`row 3 reads "a" in columns 1, 2 and first in the history: shared keys %d %d %d (want all equal), per-column keys %d %d (want different)`, sk[4], sk[5], hist[6], k[4], k[5])
	}
	if c := set.Truncated(); len(c) != 2 || c[0].Spec.Name != "hist" || c[0].Fields != 1 || c[1].Spec.Name != "raw" || c[1].Fields != 1 {
		t.Errorf("truncated %+v, want hist and raw once each", c)
	}
}

// Reading batches of int64 keys, multi-valued columns included, allocates
// nothing per batch.
func TestKeySpecsStreamWithoutAllocating(t *testing.T) {
	var content strings.Builder
	for range 50 {
		content.WriteString(keysFile())
	}
	g := loadModel(t, "train.tsv", content.String(), keysData)
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
}

// A key: int64 field that is no integer of the int64 range, the padding
// key itself and an empty field without fill are errors at the data
// file's line, naming the spec and what to do.
func TestKeyLineErrors(t *testing.T) {
	for _, c := range []struct{ row, want string }{
		{"1\tab\t1", `train.tsv:2: column 1: "ab" is not an integer of the int64 range, because it is read as int64 keys "u" (`},
		{"1\t9223372036854775808\t1", `train.tsv:2: column 1: "9223372036854775808" is not an integer of the int64 range`},
		{"1\t-9223372036854775809\t1", `"-9223372036854775809" is not an integer of the int64 range`},
		{"1\t1.5\t1", `"1.5" is not an integer of the int64 range`},
		{"1\t-9223372036854775808\t1", `train.tsv:2: column 1: key -9223372036854775808 is the padding key of int64 keys (-2^63, 2^63 as uint64), which data.ids[0] "u" (`},
		{"1\t\t1", `train.tsv:2: column 1 is empty; add fill: KEY to data.ids[0] (`},
		{"1\t5\t7;-9223372036854775808", `train.tsv:2: column 2: key -9223372036854775808 is the padding key of int64 keys (-2^63, 2^63 as uint64), which data.ids[1] "m"`},
		{"1\t5\tx;1", `train.tsv:2: column 2: "x" is not an integer of the int64 range, because it is read as int64 keys "m"`},
	} {
		g := loadModel(t, "train.tsv", "0\t1\t1\n"+c.row+"\n", "  delimiter: tab\n  label: {name: y, column: 0}\n  ids:\n    - {name: u, column: 1, key: int64}\n    - {name: m, column: 2, key: int64, separator: \";\", max_len: 2}\n")
		for _, stream := range []bool{false, true} {
			var err error
			if stream {
				_, _, err = Count(g.Data)
			} else {
				_, err = Load(g.Data)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("row %q (stream %t): %v, want an error containing %q", c.row, stream, err, c.want)
			}
		}
	}
}

// parseInt64 reads the whole int64 range and nothing else.
func TestParseInt64(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "-0": 0, "+7": 7, "9223372036854775807": math.MaxInt64, "-9223372036854775808": math.MinInt64,
		"123456789012345678": 123456789012345678, "-1234567890123456789": -1234567890123456789, "0000000000000000001": 1} {
		if got, ok := parseInt64([]byte(s)); !ok || got != want {
			t.Errorf("parseInt64(%q) = %d, %t; want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "-", "+", "9223372036854775808", "-9223372036854775809", "18446744073709551615", "99999999999999999999", "1e3", "0x10", "1 2", "--1"} {
		if got, ok := parseInt64([]byte(s)); ok {
			t.Errorf("parseInt64(%q) = %d, want an error", s, got)
		}
	}
	if ir.PadKey != math.MinInt64 {
		t.Fatal("the padding key moved")
	}
}

// A held-out fraction splits the keys with their rows: the training and
// held-out sets hold the file's rows of keys that HeldOut assigns them.
func TestHeldOutSplitsKeys(t *testing.T) {
	var content strings.Builder
	for range 5 {
		content.WriteString(keysFile())
	}
	g := loadModel(t, "train.tsv", content.String(), keysData+"  eval: {fraction: 0.3}\n")
	all, err := Load(loadModel(t, "train.tsv", content.String(), keysData).Data)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := LoadSplit(g.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	held, err := HeldOut(all.Rows, 0.3, g.Data.Seed)
	if err != nil {
		t.Fatal(err)
	}
	var train, eval []int64
	for r := range all.Rows {
		row := all.Keys[r*all.NK : (r+1)*all.NK]
		if held[r] {
			eval = append(eval, row...)
		} else {
			train = append(train, row...)
		}
	}
	if !slices.Equal(sp.Train.Keys, train) || !slices.Equal(sp.Eval.Keys, eval) || sp.Eval.NK != all.NK || len(eval) == 0 {
		t.Errorf("held-out split: train %d keys, eval %d; want %d and %d in file order", len(sp.Train.Keys), len(sp.Eval.Keys), len(train), len(eval))
	}
}
