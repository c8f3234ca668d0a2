package data

import (
	"slices"
	"strings"
	"testing"
)

// A CSV as RFC 4180 writes it (MovieLens titles in quotes holding commas,
// doubled quotes and a newline) reads field by field as written, loaded
// and streamed alike; a streamed trainer skipping rows skips whole
// records, the quoted newline included.
func TestQuotedCSVReadAsRFC4180(t *testing.T) {
	const file = "user,title,rating\n" +
		"1,\"Bridges of Madison County, The (1995)\",5\n" +
		"2,\"The \"\"Heat\"\"\",3\n" +
		"3,\"two\nlines, one title\",4\n" +
		"4,  plain  ,1\n"
	titles := []string{"Bridges of Madison County, The (1995)", `The "Heat"`, "two\nlines, one title", "plain"}
	g := loadModel(t, "m.csv", file, "  header: true\n  features: {name: r, column: rating}\n  ids: {name: t, column: title, hash_buckets: 1000000}\n  label: {name: u, column: user}\n")
	set, err := Load(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	var want []int32
	for _, s := range titles {
		want = append(want, independentHash(1, s, 1000000))
	}
	if !slices.Equal(set.IDs, want) || !slices.Equal(set.Features, []float32{5, 3, 4, 1}) || !slices.Equal(set.Labels, []int32{1, 2, 3, 4}) {
		t.Fatalf("loaded ids %v features %v labels %v, want %v [5 3 4 1] [1 2 3 4]", set.IDs, set.Features, set.Labels, want)
	}
	fs, err := OpenStream(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	for start := int64(0); start < 9; start++ { // every start: skips over the quoted newline
		b := newBatch(g.Data, 1)
		if err := fs.Fill(start, b.all); err != nil {
			t.Fatal(err)
		}
		r := start % 4
		if b.ids.I[0] != want[r] || b.features.F[0] != set.Features[r] {
			t.Errorf("stream row %d: id %d feature %v, want %d %v", start, b.ids.I[0], b.features.F[0], want[r], set.Features[r])
		}
	}
	if n, err := Rows(g.Data); err != nil || n != 4 {
		t.Errorf("Rows = %d, %v; want 4 (a quoted newline is not a row)", n, err)
	}
}

// A quote problem stops the read at its line and column, loaded and
// streamed, and names the model's data section.
func TestQuoteErrorsNameLineAndColumn(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"a,b\n1,\"x\"y\n", "m.csv:2:6: 'y' after the closing quote of a field"},
		{"a,b\n1,2\n3,\"open\n4,5\n", "m.csv:3:3: a quoted field starts here and is not closed: the file ends inside it"},
	} {
		for _, stream := range []bool{false, true} {
			g := loadModel(t, "m.csv", c.file, "  header: true\n  features: {name: x, columns: [a]}\n  ids: {name: b, column: b, hash_buckets: 10}\n")
			var err error
			if stream {
				var fs *FileStream
				if fs, err = OpenStream(g.Data); err == nil {
					err = fs.Epoch(newBatch(g.Data, 1).all, func(int) error { return nil })
					fs.Close()
				}
			} else {
				_, err = Load(g.Data)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "(data at ") {
				t.Errorf("%q stream %v: got %v, want %q", c.file, stream, err, c.want)
			}
		}
	}
}

// Columns by name: a list in any order, ranges by name or by number
// (both ends included), names: for a headerless file, and the two-number
// half-open range as before, each reading the columns it names.
func TestColumnsByNameListsAndRanges(t *testing.T) {
	const file = "1,10,20,30,40,a\n0,11,21,31,41,b\n"
	for _, c := range []struct {
		features string
		want     []float32
	}{
		{"[I3, I1]", []float32{30, 10, 31, 11}},
		{"I1..I3", []float32{10, 20, 30, 11, 21, 31}},
		{"[I4, I1..I2]", []float32{40, 10, 20, 41, 11, 21}},
		{"1..2", []float32{10, 20, 11, 21}},
		{"[1, 3]", []float32{10, 20, 11, 21}},
		{"[4, 1..1]", []float32{40, 10, 41, 11}},
		{"[I2]", []float32{20, 21}},
	} {
		g := loadModel(t, "h.csv", file, "  names: [label, I1, I2, I3, I4, C1]\n  label: {name: y, column: label}\n  features: {name: x, columns: "+c.features+"}\n")
		for _, stream := range []bool{false, true} {
			var got []float32
			if stream {
				fs, err := OpenStream(g.Data)
				if err != nil {
					t.Fatal(err)
				}
				b := newBatch(g.Data, 2)
				if err := fs.Fill(0, b.all); err != nil {
					t.Fatal(err)
				}
				fs.Close()
				got = b.features.F
			} else {
				set, err := Load(g.Data)
				if err != nil {
					t.Fatal(err)
				}
				got = set.Features
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("columns: %s (stream %v) read %v, want %v", c.features, stream, got, c.want)
			}
		}
	}
}
