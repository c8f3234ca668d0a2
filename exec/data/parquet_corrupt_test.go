package data

import (
	"errors"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
)

// A flat column's page whose parts disagree (a file written wrong, or
// hostile: parquet-go hands the arrays over as the file has them) gives
// the rows before the bad one, then an error naming the column and what
// is wrong, and nothing after it: never an index past an array.
func TestCorruptParquetPageIsRefusedAtItsRow(t *testing.T) {
	cases := []struct {
		name string
		page flatPage
		good int    // rows handed out before the error
		want string // in the error
	}{
		{"dictionary index past its entries", flatPage{
			kind: flatDict, rows: 4, nv: 4, idx: []int32{1, 0, 3, 1},
			entries: flatValues{kind: flatInt64, i64: []int64{10, 20, 30}, n: 3},
		}, 2, "dictionary index 3 past its 3 entries"},
		{"negative dictionary index", flatPage{
			kind: flatDict, rows: 3, nv: 3, idx: []int32{2, -1, 0},
			entries: flatValues{kind: flatInt64, i64: []int64{10, 20, 30}, n: 3},
		}, 1, "dictionary index -1 past its 3 entries"},
		{"fewer values than rows", flatPage{
			kind: flatInt64, rows: 5, nv: 3, vals: flatValues{kind: flatInt64, i64: []int64{7, 8, 9}, n: 3},
		}, 3, "holds fewer values than its rows say"},
		{"fewer values than rows past nulls", flatPage{
			kind: flatInt64, rows: 4, nv: 1, defs: []byte{1, 0, 1, 1}, maxDef: 1,
			vals: flatValues{kind: flatInt64, i64: []int64{7}, n: 1},
		}, 2, "holds fewer values than its rows say"},
		{"more rows than a chunk, index bad in the second", flatPage{
			kind: flatDict, rows: flatChunkRows + 8, nv: flatChunkRows + 8,
			idx:     append(make([]int32, flatChunkRows+2), 9, 0, 0, 0, 0, 0),
			entries: flatValues{kind: flatInt64, i64: []int64{10}, n: 1},
		}, flatChunkRows + 2, "dictionary index 9 past its 1 entries"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &parquetSource{spec: &dsl.Data{Names: []string{"C1"}}}
			c := &parquetColumn{flat: true, flatPage: tc.page}
			good, taken := 0, 0 // rows handed out; values they took
			var err error
			for {
				var ok bool
				ok, err = s.flatRow(c, 0, false)
				if err != nil || !ok {
					break
				}
				fp := &c.flatPage
				tag, x := fp.ch.tag[fp.at-1], int64(fp.ch.x[fp.at-1])
				if tag == chunkNull {
					if tc.page.defs == nil || tc.page.defs[good] == tc.page.maxDef {
						t.Fatalf("row %d: a null, want a value", good+1)
					}
				} else {
					want := int64(0)
					if tc.page.kind == flatDict {
						want = tc.page.entries.i64[tc.page.idx[taken]]
					} else {
						want = tc.page.vals.i64[taken]
					}
					if tag != chunkInt64 || x != want {
						t.Fatalf("row %d: tag %d value %d, want an int64 %d", good+1, tag, x, want)
					}
					taken++
				}
				good++
				if good > tc.page.rows {
					t.Fatalf("more rows than the page's %d", tc.page.rows)
				}
			}
			if err == nil {
				t.Fatalf("%d rows and no error, want %d rows then %q", good, tc.good, tc.want)
			}
			if good != tc.good {
				t.Errorf("%d rows before the error, want %d", good, tc.good)
			}
			if !errors.Is(err, errParquetPage) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"C1"`) {
				t.Errorf("error %q, want %q about column \"C1\" wrapping %q", err, tc.want, errParquetPage)
			}
			// The page is done: the next row comes from the next page.
			if fp := &c.flatPage; fp.at != fp.n || fp.row != fp.rows || fp.err != nil {
				t.Errorf("after the error the page still gives rows (at %d of %d, row %d of %d, err %v)", fp.at, fp.n, fp.row, fp.rows, fp.err)
			}
		})
	}
}
