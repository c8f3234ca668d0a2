package tfrecord

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// decoded is a feature with a slot as a test compares it: its slot, kind
// and all its values; and whether a One value is not the one value its
// list holds.
type decoded struct {
	slot int
	kind Kind
	vals string // each value, then the error walking them
	bad  bool
}

// newDecoded checks a One value (raw or x) against the values vals walked.
func newDecoded(slot int, kind Kind, one bool, raw []byte, x uint64, vals string) decoded {
	d := decoded{slot: slot, kind: kind, vals: vals}
	if one {
		if kind == Bytes {
			x = 0
		} else {
			raw = nil
		}
		d.bad = vals != fmt.Sprintf("%q/%d ", raw, x)
	}
	return d
}

func walk(vs Values) string {
	var s string
	for {
		b, x, ok, err := vs.Next()
		if err != nil {
			return s + "error: " + err.Error()
		}
		if !ok {
			return s
		}
		s += fmt.Sprintf("%q/%d ", b, x)
	}
}

// reference reads rec with Features, the slots looked up by key.
func reference(rec []byte, slots map[string]int) ([]decoded, error) {
	fs := NewFeatures(rec)
	var out []decoded
	var f Feature
	for {
		ok, err := fs.Next(&f)
		if err != nil || !ok {
			return out, err
		}
		slot, read := slots[string(f.Key)]
		if !read {
			continue
		}
		out = append(out, newDecoded(slot, f.Kind, f.One, f.Raw, f.X, walk(f.Values())))
	}
}

func decodeAll(k *Keys, rec []byte) ([]decoded, error) {
	vals, err := k.Decode(rec, nil, nil)
	var out []decoded
	for _, v := range vals {
		var raw []byte
		if v.One && v.Kind == Bytes {
			raw = v.Raw(rec)
		}
		out = append(out, newDecoded(v.Slot, v.Kind, v.One, raw, v.X, walk(v.Values(rec))))
	}
	return out, err
}

// scratch are checkKeys' outs, kept: Decode grows one to the keys learnt.
var scratch [2][]Value

// checkKeys checks k's Decode of rec against reference; and Decode with a
// sink against Decode without (once more, the keys learnt): the One
// bytes_list values of slots below 4 go to its Raw, the One int64_list
// values of slots 0 to 2 to its Int (the last of a slot's), the others to
// out, in order.
func checkKeys(t *testing.T, k *Keys, slots map[string]int, i int, rec []byte) {
	t.Helper()
	want, werr := reference(rec, slots)
	got, gerr := decodeAll(k, rec)
	if fmt.Sprint(werr) != fmt.Sprint(gerr) || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("record %d (% x):\n got %v, %v\nwant %v, %v", i, rec, got, gerr, want, werr)
	}
	all, aerr := k.Decode(rec, scratch[0][:0], nil)
	var wantRest []Value
	wantRaw, wantInt := make([][]byte, 4), make([]any, 4)
	intOK := []bool{true, true, true, false}
	for _, v := range all {
		switch {
		case v.Slot < len(wantRaw) && v.Kind == Bytes && v.One:
			wantRaw[v.Slot] = v.Raw(rec)
		case v.Slot < len(intOK) && intOK[v.Slot] && v.Kind == Int64 && v.One:
			wantInt[v.Slot] = int64(v.X)
		default:
			wantRest = append(wantRest, v)
		}
	}
	sink := &Sink{Raw: make([][]byte, len(wantRaw)), Int: make([]int64, 4), Got: make([]bool, 4), IntOK: intOK}
	rest, rerr := k.Decode(rec, scratch[1][:0], sink)
	scratch[0], scratch[1] = all, rest
	gotInt := make([]any, 4)
	for s, ok := range sink.Got {
		if ok {
			gotInt[s] = sink.Int[s]
		}
	}
	if fmt.Sprint(aerr) != fmt.Sprint(rerr) || !slices.Equal(rest, wantRest) || fmt.Sprint(gotInt) != fmt.Sprint(wantInt) ||
		!slices.EqualFunc(sink.Raw, wantRaw, func(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }) {
		t.Fatalf("record %d (% x), with a sink:\n got %v, %q, %v, %v\nwant %v, %q, %v, %v", i, rec, rest, sink.Raw, gotInt, rerr, wantRest, wantRaw, wantInt, aerr)
	}
}

// example is a tf.Example of entries (each a key and a Feature message).
func example(entries ...[]byte) []byte {
	var feats []byte
	for _, e := range entries {
		feats = appendField(feats, 1, e)
	}
	return appendField(nil, 1, feats)
}

func appendField(b []byte, num int, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(num<<3|2))
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// entry is a map entry's fields: the key, the Feature.
func entry(key string, feature []byte) []byte {
	return appendField(appendField(nil, 1, []byte(key)), 2, feature)
}

// one value of a kind in the common layout
func bytesF(vs ...string) []byte {
	var l []byte
	for _, v := range vs {
		l = appendField(l, 1, []byte(v))
	}
	return appendField(nil, 1, l)
}

func int64F(vs ...uint64) []byte {
	var p []byte
	for _, v := range vs {
		p = binary.AppendUvarint(p, v)
	}
	return appendField(nil, 3, appendField(nil, 1, p))
}

func floatF(vs ...uint32) []byte {
	var p []byte
	for _, v := range vs {
		p = binary.LittleEndian.AppendUint32(p, v)
	}
	return appendField(nil, 2, appendField(nil, 1, p))
}

// Decode gives the features Features gives, with the slots their keys
// look up, whatever the records' layouts: in the order it learnt or
// another, features left out or new, a key's kind changed, several
// values, keys and values too long for a byte's length, other layouts of
// the wire format (an unpacked value, two lists); and on a corrupt record
// the same features before the same error.
func TestDecodeAgreesWithFeatures(t *testing.T) {
	slots := map[string]int{"label": 0, "I1": 1, "I2": 2, "C1": 3, "C2": 4, "a_key_longer_than_fourteen": 5, "f": 6, "k1234567": 7}
	k := NewKeys(func(key []byte) int {
		if s, ok := slots[string(key)]; ok {
			return s
		}
		return -1
	})
	long := string(bytes.Repeat([]byte("v"), 200))
	common := func(r *rand.Rand) [][]byte {
		return [][]byte{
			entry("label", int64F(uint64(r.IntN(2)))),
			entry("I1", int64F(r.Uint64N(1<<20))),
			entry("skipped", bytesF("x")),
			entry("I2", int64F(uint64(r.IntN(100)))),
			entry("C1", bytesF(fmt.Sprintf("%08x", r.Uint32()))),
			entry("C2", bytesF(fmt.Sprintf("%x", r.Uint32()))),
			entry("f", floatF(r.Uint32())),
			entry("k1234567", bytesF("v")),
			entry("a_key_longer_than_fourteen", int64F(7)),
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	var recs [][]byte
	for i := range 400 {
		es := common(r)
		switch i % 10 {
		case 1: // left out
			es = append(es[:1], es[2:]...)
			es = append(es[:3], es[5:]...)
		case 2: // reversed
			for a, b := 0, len(es)-1; a < b; a, b = a+1, b-1 {
				es[a], es[b] = es[b], es[a]
			}
		case 3: // kinds changed, several values, none
			es[1] = entry("I1", floatF(1, 2))
			es[3] = entry("I2", int64F(1, 300, 5))
			es[4] = entry("C1", bytesF())
			es[5] = entry("C2", bytesF("a", "b"))
			es[6] = entry("f", floatF())
		case 4: // long values: lengths of two bytes
			es[4] = entry("C1", bytesF(long))
			es[1] = entry("I1", int64F(1<<63))
		case 5: // new keys among the known ones
			es = append(es[:2], append([][]byte{entry(fmt.Sprint("new", i), int64F(1)), entry("I9", bytesF("z"))}, es[2:]...)...)
		case 6: // other layouts: an unpacked int64, a float as fixed32, two lists, an empty Feature
			es[1] = entry("I1", appendField(nil, 3, []byte{0x08, 0x05}))
			es[6] = entry("f", appendField(nil, 2, []byte{0x0d, 1, 2, 3, 4}))
			es[3] = entry("I2", append(int64F(3), bytesF("y")...))
			es[4] = entry("C1", nil)
		}
		recs = append(recs, example(es...))
	}
	check := func(i int, rec []byte) {
		t.Helper()
		checkKeys(t, k, slots, i, rec)
	}
	for i, rec := range recs {
		check(i, rec)
		if i%10 == 0 && i > 0 { // in the order learnt: each value found as One
			vals, _ := k.Decode(rec, nil, nil)
			for _, v := range vals {
				if !v.One || v.Slot == 5 && v.X != 7 {
					t.Fatalf("record %d: %+v", i, v)
				}
			}
		}
	}
	// hostile: an entry laid out as the common one but for lengths past
	// a byte's (0x82: a varint's first byte), which reads as one whose
	// length runs past the record
	v := bytes.Repeat([]byte{'v'}, 0x78)
	hostile := append([]byte{0x0a, 2 + 8 + 0x78, 0x0a, 2, 'C', '1', 0x12, 0x78 + 4, 0x0a, 0x78 + 2, 0x0a, 0x78}, v...)
	check(-1, appendField(nil, 1, append(appendField(nil, 1, entry("label", int64F(1))), hostile...)))
	// corrupt, read by keys that learnt the records' order: every record
	// cut short, the Features message's entries cut short, a byte of it
	// changed
	k = NewKeys(k.slot)
	check(0, recs[0])
	for i, rec := range recs[:40] {
		_, m := binary.Uvarint(rec[1:])
		inner := rec[1+m:] // the Features message's entries
		for n := range len(rec) {
			check(i, rec[:n])
			if n <= len(inner) {
				check(i, appendField(nil, 1, inner[:n]))
			}
			c := bytes.Clone(rec)
			c[n] ^= byte(1 + r.IntN(255))
			check(i, c)
			c[n] = 0x80
			check(i, c)
		}
	}
}

// common is k.common from rec[at0:] and place 0, with the Value it gave.
func common(k *Keys, rec []byte, at0 int) ([]byte, int, []Value) {
	k.out, k.sink = nil, &noSink
	b, at := k.common(rec, rec[at0:], 0)
	return b, at, k.out
}

// Keys reads an entry in the common layout by comparing its bytes up to
// its value with the ones its key's place expects: it takes the entries of
// a record in the order learnt, keys of 1 to 14 bytes, and stops at an
// entry any byte of whose key, tags or lengths differs (read the other
// way, by Features).
func TestCommonComparesEveryByteBeforeTheValue(t *testing.T) {
	keys := []string{"a", "label", "k123456", "k1234567", "k12345678901", "k1234567890123"}
	es := [][]byte{entry(keys[0], int64F(300)), entry(keys[1], floatF(7)), entry(keys[2], bytesF("12345678")), entry(keys[3], bytesF("v")), entry(keys[4], int64F(1)), entry(keys[5], bytesF("w"))}
	k := NewKeys(func(key []byte) int { return len(key) })
	rec := example(append(es, entry("a_key_of_15byte", bytesF("0123456789012345678901234567890")))...)
	if _, err := k.Decode(rec, nil, nil); err != nil {
		t.Fatal(err)
	}
	_, m := binary.Uvarint(rec[1:])
	at0 := 1 + m // where the Features message's entries start
	if _, at, out := common(k, rec, at0); at != len(es) || len(out) != len(es) || !out[0].One || out[0].X != 300 {
		t.Fatalf("read %d entries (%+v), want %d", at, out, len(es))
	}
	pos := at0
	for i, e := range es {
		for p := range 10 + len(keys[i]) { // the bytes before the value
			for _, flip := range []byte{0x01, 0x40, 0x80} {
				c := bytes.Clone(rec)
				c[pos+p] ^= flip
				if _, at, _ := common(k, c, at0); at != i {
					t.Fatalf("entry %d, byte %d ^ %#x: read %d entries, want %d", i, p, flip, at, i)
				}
			}
		}
		pos += 2 + len(e) // the entry's tag and length, then it
	}
	slots := map[string]int{}
	for _, key := range append(keys, "a_key_of_15byte") {
		slots[key] = len(key)
	}
	// the entries cut short: read as Features reads them
	for n := range len(rec) - at0 {
		checkKeys(t, k, slots, n, appendField(nil, 1, rec[at0:at0+n]))
	}
	// hostile: the first entry laid out as the common one but for lengths
	// past a byte's (0x80: a varint's first byte), which reads as one
	// whose length runs past the record
	vl := 0x80 - 8 - len(keys[0])
	hostile := append([]byte{0x0a, byte(8 + len(keys[0]) + vl), 0x0a, byte(len(keys[0])), keys[0][0], 0x12, byte(vl + 4), 0x1a, byte(vl + 2), 0x0a, byte(vl)}, bytes.Repeat([]byte{1}, vl)...)
	checkKeys(t, k, slots, -1, appendField(nil, 1, append(hostile, rec[at0:]...)))
}

// BenchmarkLearnKeys decodes, with new Keys, a record of 2,000 keys and
// then one listing 2,000 new keys before those: each new key is learnt
// before the 2,000 known ones, which move a place. Keys keeps their
// index by number, the places in a slice: the 2,000 moves are slice
// stores, not map writes of each key's string (about 10x the processor
// time before, 1.3 s against 0.13 s for the run's 3 decodes of each).
func BenchmarkLearnKeys(b *testing.B) {
	var known, fresh [][]byte
	for i := range 2000 {
		known = append(known, entry(fmt.Sprintf("k%05d", i), int64F(1)))
		fresh = append(fresh, entry(fmt.Sprintf("n%05d", i), int64F(1)))
	}
	rec, rec2 := example(known...), example(append(fresh, known...)...)
	for i := 0; i < b.N; i++ {
		k := NewKeys(func(key []byte) int { return 1 })
		if _, err := k.Decode(rec, nil, nil); err != nil {
			b.Fatal(err)
		}
		vals, err := k.Decode(rec2, nil, nil)
		if err != nil || len(vals) != 4000 {
			b.Fatal(len(vals), err)
		}
	}
}
