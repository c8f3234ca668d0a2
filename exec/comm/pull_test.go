package comm

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"
)

// A pull's request round-trips through its bytes, and a request for a
// row the shard does not hold, or of broken length, is refused before
// anything is read (the pserver then stops the job naming the trainer).
func TestPullRequestBytes(t *testing.T) {
	for _, r := range []Pull{
		{At: 41, IDs: []int32{3, 0, 9}},
		{At: 1 << 40, Final: true, IDs: []int32{}},
		{At: 7, Final: true, First: 2, N: 5},
		{At: 0, First: 0, N: 0},
	} {
		got, err := DecodePull(r.encode(), 10, nil)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		same := got.At == r.At && got.Final == r.Final && got.Rows() == r.Rows()
		if r.IDs == nil {
			same = same && got.IDs == nil && got.First == r.First && got.N == r.N
		} else {
			same = same && got.IDs != nil && slices.Equal(got.IDs, r.IDs)
		}
		if !same {
			t.Errorf("%+v came back as %+v", r, got)
		}
	}
	short := Pull{At: 1, IDs: []int32{1, 2}}.encode()
	binary.LittleEndian.PutUint32(short[16:], 3) // claims 3 ids, carries 2
	for _, c := range []struct {
		b    []byte
		want string
	}{
		{Pull{At: 1, IDs: []int32{10}}.encode(), "local row 10 of a shard of 10 rows"},
		{Pull{At: 1, IDs: []int32{-1}}.encode(), "local row -1"},
		{Pull{At: 1, First: 8, N: 3}.encode(), "rows [8, 11) of a shard of 10 rows"},
		{Pull{At: 1, First: -1, N: 2}.encode(), "rows [-1, 1)"},
		{short, "a pull of 3 ids carries 2"},
		{make([]byte, 19), "not a header and whole int32 ids"},
		{make([]byte, 22), "not a header and whole int32 ids"},
	} {
		if _, err := DecodePull(c.b, 10, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.b, err, c.want)
		}
	}
}

// A pull moves at most 1 MiB of values, and at least one row.
func TestPullRows(t *testing.T) {
	for _, c := range []struct{ width, rows int }{{16, 16384}, {1, 262144}, {1 << 20, 1}, {1 << 19, 1}} {
		if got := PullRows(c.width); got != c.rows {
			t.Errorf("PullRows(%d) = %d, want %d", c.width, got, c.rows)
		}
	}
}

// A pull of a dynamic table's shard round-trips through its bytes (a
// list of keys, the padding key and both extremes included; a range of
// keys or rows; the row count), and a request of broken length or a
// range before the job's end is refused before anything is read.
func TestDynamicPullRequestBytes(t *testing.T) {
	for _, r := range []Pull{
		{At: 41, KeyList: []int64{3, -1 << 63, 1<<63 - 1, 0}},
		{At: 9, KeyList: []int64{}},
		{At: 7, Final: true, First: 2, N: 5, ReplyKeys: true},
		{At: 7, Final: true, First: 0, N: 3},
		{At: 7, Final: true, Count: true},
	} {
		got, err := DecodeDynamicPull(r.encode(), nil)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		same := got.At == r.At && got.Final == r.Final && got.ReplyKeys == r.ReplyKeys && got.Count == r.Count && got.Rows() == r.Rows()
		if r.KeyList == nil {
			same = same && got.KeyList == nil && got.First == r.First && got.N == r.N
		} else {
			same = same && got.KeyList != nil && slices.Equal(got.KeyList, r.KeyList)
		}
		if !same {
			t.Errorf("%+v came back as %+v", r, got)
		}
	}
	short := Pull{At: 1, KeyList: []int64{1, 2}}.encode()
	binary.LittleEndian.PutUint32(short[16:], 3) // claims 3 keys, carries 2
	for _, c := range []struct {
		b    []byte
		want string
	}{
		{short, "a pull of 3 keys of a dynamic table's shard carries 16 bytes"},
		{Pull{At: 1, IDs: []int32{1}}.encode(), "must be a range or a list of keys"},
		{make([]byte, 19), "shorter than its header"},
	} {
		if _, err := DecodeDynamicPull(c.b, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.b, err, c.want)
		}
	}
}
