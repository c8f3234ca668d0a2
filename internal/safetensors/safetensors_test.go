package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// file builds a file of a header text and body zero bytes, the header's
// length word as given.
func file(header string, body int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), make([]byte, body)...)
}

// encoded writes tensors laid out by Encode, tensor i's bytes all i+1.
func encoded(t testing.TB, tensors []Tensor, meta map[string]string) []byte {
	t.Helper()
	l, err := Encode(tensors, meta)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, l.Size)
	copy(b, l.Header)
	for i, x := range tensors {
		n, _ := x.Bytes()
		for j := range n {
			b[l.At[i]+j] = byte(i + 1)
		}
	}
	return b
}

// What Encode lays out, Decode reads back: the same tensors at the
// offsets Encode gave them, with the metadata, each tensor's bytes its
// own, in the order given (not name order).
func TestEncodeDecodeRoundTrip(t *testing.T) {
	tensors := []Tensor{
		{"z.keys", "I64", []int64{3}},
		{"a", "F32", []int64{3, 2}},
		{"empty", "F32", []int64{0, 5}},
		{"scalar", "U8", []int64{}},
		{"bits", "U64", []int64{2}},
	}
	meta := map[string]string{"step": "7", "<&>": "\"quoted\""}
	b := encoded(t, tensors, meta)
	l, _ := Encode(tensors, meta)
	if len(l.Header)%8 != 0 {
		t.Errorf("header of %d bytes, not a multiple of 8", len(l.Header))
	}
	f, err := Decode(bytes.NewReader(b), int64(len(b)), "f")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(f.Meta) != fmt.Sprint(meta) {
		t.Errorf("metadata %v, want %v", f.Meta, meta)
	}
	if want := []string{"a", "bits", "empty", "scalar", "z.keys"}; !slices.Equal(f.Names(), want) {
		t.Errorf("names %v, want %v", f.Names(), want)
	}
	for i, x := range tensors {
		e, err := f.Want(x.Name, x.DType, x.Shape...)
		if err != nil {
			t.Fatal(err)
		}
		if e.Begin+int64(len(l.Header)) != l.At[i] {
			t.Errorf("%s begins at %d of the data, Encode put it at %d of the file", x.Name, e.Begin, l.At[i])
		}
		n, _ := x.Bytes()
		got := make([]byte, n)
		if err := f.Read(e, 0, got); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(got, func(c byte) bool { return c != byte(i+1) }) {
			t.Errorf("%s read %v, want %d bytes of %d", x.Name, got, n, i+1)
		}
	}
	// A read past the tensor's end is refused, not served from the next.
	e, _ := f.Entry("z.keys")
	if err := f.Read(e, 20, make([]byte, 8)); err == nil || !strings.Contains(err.Error(), "holds 24") {
		t.Errorf("reading past z.keys: %v", err)
	}
	if _, err := f.Want("a", "F32", 3, 3); err == nil || !strings.Contains(err.Error(), "dimension 1 of size 3") {
		t.Errorf("a wrong dimension: %v", err)
	}
	if _, err := f.Want("nope", "F32"); err == nil || !strings.Contains(err.Error(), `no tensor "nope"`) {
		t.Errorf("a missing tensor: %v", err)
	}
}

// Encode refuses what no reader could take back: a dtype the format does
// not define, a negative or overflowing shape, a name twice or the
// metadata's name.
func TestEncodeRefuses(t *testing.T) {
	for _, c := range []struct {
		tensors []Tensor
		want    string
	}{
		{[]Tensor{{"x", "F128", []int64{1}}}, "which safetensors does not define"},
		{[]Tensor{{"x", "F32", []int64{-1}}}, "has shape [-1]"},
		{[]Tensor{{"x", "F32", []int64{1 << 31, 1 << 31}}}, "has shape"},
		{[]Tensor{{"x", "U8", []int64{math.MaxInt64 / 2}}, {"y", "U8", []int64{math.MaxInt64 / 2}}}, "past the largest file"},
		{[]Tensor{{"x", "U8", nil}, {"x", "U8", nil}}, `two tensors named "x"`},
		{[]Tensor{{"__metadata__", "U8", nil}}, "cannot be named"},
	} {
		if _, err := Encode(c.tensors, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.tensors, err, c.want)
		}
	}
}

// hostile are headers an attacker might write, each with the body it
// comes with and what the refusal must say. Every one is refused with an
// error naming the file, never a panic, and never after allocating what
// the header claims.
var hostile = []struct {
	name, header string
	body         int
	want         string
}{
	{"not an object", `[1,2,3]`, 0, "a JSON object expected"},
	{"not JSON", `{"x":`, 0, "header"},
	{"junk after", `{} {}`, 0, "bytes after the header's object"},
	{"named twice", `{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"x":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2, `"x" is named twice`},
	{"metadata of numbers", `{"__metadata__":{"a":1}}`, 0, "metadata"},
	{"unknown dtype", `{"x":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}}`, 1, "which safetensors does not define"},
	{"no offsets", `{"x":{"dtype":"U8","shape":[1]}}`, 1, "lacks its dtype, shape or data_offsets"},
	{"three offsets", `{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, 1, "not [begin, end]"},
	{"fractional offset", `{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1.5]}}`, 1, `entry "x"`},
	{"offset past int64", `{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,9223372036854775808]}}`, 1, `entry "x"`},
	{"negative dimension", `{"x":{"dtype":"U8","shape":[-2],"data_offsets":[0,0]}}`, 0, "has shape [-2]"},
	{"overflowing shape", `{"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}}`, 16, "has shape"},
	{"shape's product wraps to 0", `{"x":{"dtype":"U8","shape":[4294967296,4294967296,2],"data_offsets":[0,0]}}`, 0, "has shape"},
	{"short", `{"x":{"dtype":"I64","shape":[3],"data_offsets":[0,16]}}`, 16, "do not match shape [3]"},
	{"negative begin", `{"x":{"dtype":"U8","shape":[8],"data_offsets":[-8,0]}}`, 8, "do not match"},
	{"past the data", `{"x":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}}`, 8, "do not match"},
	// The end before the begin, their difference wrapping to the shape's 8 bytes.
	{"wrapping offsets", `{"x":{"dtype":"I64","shape":[1],"data_offsets":[9223372036854775807,-9223372036854775801]}}`, 16, "do not match shape [1]"},
	{"overlap", `{"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"y":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, 6, "overlaps"},
	{"same bytes twice", `{"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"y":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}`, 4, "overlaps"},
	{"gap", `{"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"y":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}}`, 10, "bytes 4 to 6 of the data belong to no tensor"},
	{"hole at the start", `{"x":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, 8, "bytes 0 to 4"},
	{"bytes after the tensors", `{"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, 12, "bytes 4 to 12 of the data belong to no tensor"},
	{"empty tensor inside another", `{"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"y":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}}`, 4, "overlaps"},
}

func TestDecodeRefusesHostileHeaders(t *testing.T) {
	for _, c := range hostile {
		b := file(c.header, c.body)
		_, err := Decode(bytes.NewReader(b), int64(len(b)), "evil.safetensors")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "evil.safetensors is not a valid safetensors file") {
			t.Errorf("%s: %v, want an error naming the file and saying %q", c.name, err, c.want)
		}
	}
}

// The header's length word is checked before the header is allocated.
func TestDecodeRefusesHeaderLengths(t *testing.T) {
	for _, c := range []struct {
		name string
		b    []byte
		size int64
		want string
	}{
		{"empty", nil, 0, "shorter than its 8-byte header length"},
		{"7 bytes", make([]byte, 7), 7, "shorter than its 8-byte header length"},
		{"longer than the file", binary.LittleEndian.AppendUint64(nil, 100), 64, "header length 100 exceeds the file"},
		{"2^64-1", binary.LittleEndian.AppendUint64(nil, math.MaxUint64), 64, "exceeds the file"},
		// A file as large as it claims, but a header over the limit: the
		// reader holds only the length word, so a read of the header fails the test.
		{"over the limit", binary.LittleEndian.AppendUint64(nil, MaxHeader+8), MaxHeader + 64, "exceeds the limit"},
		{"zero", binary.LittleEndian.AppendUint64(nil, 0), 8, "header"},
	} {
		r := lengthOnly{c.b}
		if _, err := Decode(r, c.size, "f"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// lengthOnly is a file of which only b can be read.
type lengthOnly struct{ b []byte }

func (l lengthOnly) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > int64(len(l.b)) {
		return 0, errors.New("read past the length word")
	}
	return copy(p, l.b[off:]), nil
}

// FuzzSafetensorsHeader: no input makes Decode panic, and an input it
// accepts keeps its promises: the entries tile the data, each within it,
// each of its shape's bytes, readable whole; and Encode of the same
// tensors in offset order lays them out at the same offsets.
func FuzzSafetensorsHeader(f *testing.F) {
	f.Add(encoded(f, []Tensor{{"k", "I64", []int64{2}}, {"v", "F32", []int64{2, 3}}}, map[string]string{"a": "b"}))
	f.Add(encoded(f, []Tensor{{"e", "U8", []int64{0}}, {"s", "BF16", nil}}, nil))
	for _, c := range hostile {
		f.Add(file(c.header, c.body))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fl, err := Decode(bytes.NewReader(b), int64(len(b)), "fuzz")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz is not a valid safetensors file: ") && !strings.HasPrefix(err.Error(), "cannot read fuzz: ") {
				t.Fatalf("an error that does not name the file: %v", err)
			}
			return
		}
		body := int64(len(b)) - fl.data
		var tensors []Tensor
		var order []Entry
		for _, name := range fl.Names() {
			e, _ := fl.Entry(name)
			n, err := e.Bytes()
			if err != nil || e.Begin < 0 || e.End > body || e.End-e.Begin != n {
				t.Fatalf("accepted %q at [%d, %d) of %d bytes, %d for its shape (%v)", name, e.Begin, e.End, body, n, err)
			}
			if err := fl.Read(e, 0, make([]byte, min(n, 1<<20))); err != nil {
				t.Fatalf("an accepted tensor %q does not read: %v", name, err)
			}
			order = append(order, e)
		}
		slices.SortStableFunc(order, func(x, y Entry) int { return cmp.Or(cmp.Compare(x.Begin, y.Begin), cmp.Compare(x.End, y.End)) })
		for _, e := range order {
			tensors = append(tensors, e.Tensor)
		}
		l, err := Encode(tensors, fl.Meta)
		if err != nil {
			t.Fatalf("accepted tensors Encode refuses: %v", err)
		}
		var covered int64
		for i, e := range order {
			if got := l.At[i] - int64(len(l.Header)); got != e.Begin {
				t.Fatalf("%q at %d of the data, Encode lays it at %d", e.Name, e.Begin, got)
			}
			covered += e.End - e.Begin
		}
		if covered != body {
			t.Fatalf("the accepted entries cover %d of %d bytes", covered, body)
		}
	})
}
