package parquetschema

import (
	"fmt"
	"os"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// Open opens a parquet file, reading its footer (the schema and the row
// groups' metadata, not the data). Close the file when done.
func Open(path string) (*parquet.File, *os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("not a parquet file that can be read: %v", err)
	}
	return pf, f, nil
}

// Columns lists the file's columns (its top-level fields, in order) and,
// for each, the index of its leaf column in a row group; a field with
// several leaves (a struct, a map) is an error naming it.
func Columns(pf *parquet.File) (names []string, leaf []int, err error) {
	paths := pf.Schema().Columns()
	for _, fd := range pf.Schema().Fields() {
		at := -1
		for i, p := range paths {
			if p[0] != fd.Name() {
				continue
			}
			if at >= 0 {
				return nil, nil, fmt.Errorf("column %q holds several values (%s and %s): psgraph reads columns of one value or a list of values; select or flatten it when writing the file", fd.Name(), strings.Join(paths[at], "."), strings.Join(p, "."))
			}
			at = i
		}
		if at < 0 {
			return nil, nil, fmt.Errorf("column %q holds no values", fd.Name())
		}
		names, leaf = append(names, fd.Name()), append(leaf, at)
	}
	return names, leaf, nil
}

// Names lists the columns of the parquet file at path.
func Names(path string) ([]string, error) {
	pf, f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, _, err := Columns(pf)
	return names, err
}
