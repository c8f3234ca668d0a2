package data

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/psgraph/psgraph/internal/parquetschema"
)

// readsAt is a file's bytes as an io.ReaderAt that keeps the ranges read.
type readsAt struct {
	b     []byte
	reads [][2]int64 // [from, to)
}

func (r *readsAt) ReadAt(p []byte, off int64) (int, error) {
	r.reads = append(r.reads, [2]int64{off, off + int64(len(p))})
	return bytes.NewReader(r.b).ReadAt(p, off)
}

// Opening a parquet file reads its footer once, in one read: the reader's
// schema and row groups and the columns a data section addresses come
// from the same bytes, and the columns are those the model language finds
// in the file (parquetschema.Columns, its own decoding of the footer).
func TestParquetFooterIsReadOnce(t *testing.T) {
	type row struct {
		Label  int64    `parquet:"label"`
		Genres []string `parquet:"genres,list"`
		C1     *string  `parquet:"C1,optional"`
		I1     float64  `parquet:"I1"`
	}
	a := "a"
	var buf bytes.Buffer
	if err := parquet.Write(&buf, []row{{1, []string{"x", "y"}, &a, 0.5}, {0, nil, nil, 2}}); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	size := int64(len(b))
	n := int64(binary.LittleEndian.Uint32(b[size-8:]))
	from, to := size-8-n, size-8 // the footer, before its length and "PAR1"
	r := &readsAt{b: b}
	ft, err := openParquetAt(r, size)
	if err != nil {
		t.Fatal(err)
	}
	var footer int
	for _, rd := range r.reads {
		if rd[0] < to && rd[1] > from {
			footer++
		}
	}
	if footer != 1 {
		t.Errorf("opening the file read its footer [%d, %d) %d times (reads %v), want once", from, to, footer, r.reads)
	}
	path := filepath.Join(t.TempDir(), "f.parquet")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	names, leaves, err := parquetschema.Columns(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ft.names, names) || !slices.Equal(ft.leaves, leaves) || len(names) != 4 {
		t.Errorf("columns %v leaves %v, the model language's %v %v", ft.names, ft.leaves, names, leaves)
	}
	if ft.pf.NumRows() != 2 {
		t.Errorf("%d rows, want 2", ft.pf.NumRows())
	}
}
