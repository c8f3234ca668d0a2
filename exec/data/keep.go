package data

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/dsl"
)

// Kept reads the fields of some columns of a data file as they are
// written, row by row, in the order a FileStream of the same spec reads
// the rows: psgraph predict writes them beside each row's predictions
// (--keep), so that the predictions join back to the rows (an id, a
// timestamp). It reads the file through a source of its own.
type Kept struct {
	src  rowSource
	p    *rowParser
	cols []int
	out  rowOut
	vals [][]byte
}

// OpenKept opens spec's file for the columns names (names, or column
// numbers in a file without names); a column of a tfrecord or parquet
// file is found by its key or name even where the model does not read it.
func OpenKept(spec *dsl.Data, names []string) (*Kept, error) {
	ks := *spec
	ks.Features, ks.Label, ks.IDs, ks.Normalize = nil, nil, nil, ""
	ks.Names = slices.Clone(spec.Names)
	var cols []int
	for _, n := range names {
		col := slices.Index(ks.Names, n)
		if x, err := strconv.Atoi(n); col < 0 && err == nil && x >= 0 && spec.Names == nil && spec.Format == "" {
			col = x // a file without names: a column number
		}
		if col < 0 && spec.Format != "" { // a key or a column the model does not read
			ks.Names = append(ks.Names, n)
			col = len(ks.Names) - 1
		}
		if col < 0 {
			if spec.Names == nil {
				return nil, fmt.Errorf("--keep %s: %s has no column names; give column numbers (counting from 0)", n, spec.CSV)
			}
			return nil, fmt.Errorf("--keep %s: %s has no column %q; its columns are %s%s", n, spec.CSV, n, strings.Join(spec.Names[:min(len(spec.Names), 40)], ", "), dsl.Suggest(n, spec.Names))
		}
		cols = append(cols, col)
	}
	// One hashed ids spec over the columns makes every reader read them;
	// its ids are not used, the fields are.
	ks.IDs = []*dsl.Column{{Name: "kept", Cols: cols, HashBuckets: 1, Pos: spec.Pos}}
	k := &Kept{p: newRowParser(&ks), cols: cols, vals: make([][]byte, len(cols))}
	k.p.rowOut(&k.out, nil, new(int32), nil, make([]int32, len(cols)), nil)
	var err error
	if k.src, err = openSource(&ks, k.p, StreamBuffer); err != nil {
		return nil, err
	}
	return k, nil
}

// Next returns the kept fields of the next row, valid until the next
// call; nil after the last row.
func (k *Kept) Next() ([][]byte, error) {
	ok, err := k.src.row(&k.out)
	if err != nil || !ok {
		return nil, err
	}
	for i, col := range k.cols {
		k.vals[i] = k.p.fields[col]
	}
	return k.vals, nil
}

// Close closes the file.
func (k *Kept) Close() error { return k.src.close() }
