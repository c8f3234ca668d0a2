package data

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/internal/parquetschema"
)

// parquetSource is a parquet file's rows: each top-level column a column
// of the data, a list column's values a multi-valued column. It reads
// the columns the model reads, each a page at a time, row group after row
// group: it holds one page per column, whatever the file's size.
type parquetSource struct {
	spec *dsl.Data
	f    *os.File
	pf   *parquet.File
	p    *rowParser
	b    *binaryRow
	cur  []*parquetColumn // a cursor per column the model reads (b.read)
	n    int64            // the row being read (from 1)
	size int64
}

// parquetBuf is the values a column reads at a time: few enough that the
// buffers of 40 columns (24 bytes a value) stay in the cache, since a row
// takes one value of each in turn.
const parquetBuf = 128

// parquetColumn reads one leaf column's values, row by row.
type parquetColumn struct {
	leaf     int
	unsigned bool // an unsigned integer's logical type
	// flat: the column holds one value a row (or a null), not a list; its
	// values are read in place, one a row
	flat  bool
	rg    int // the row group being read
	pages parquet.Pages
	page  parquet.Page
	vals  parquet.ValueReader
	buf   []parquet.Value
	at, n int // buf[at:n] not yet consumed
}

func openParquet(spec *dsl.Data, p *rowParser) (rowSource, error) {
	pf, f, err := parquetschema.Open(spec.CSV)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec.CSV, err)
	}
	names, leaves, err := parquetschema.Columns(pf)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", spec.CSV, err)
	}
	s := &parquetSource{spec: spec, f: f, pf: pf, p: p, b: newBinaryRow(spec, p), size: fileSize(f)}
	for _, col := range s.b.read {
		at := -1
		for i, n := range names {
			if n == spec.Names[col] {
				at = i
			}
		}
		if at < 0 {
			f.Close()
			return nil, fmt.Errorf("%s: the file has no column %q, which the model reads (data at %s); was it written again since the model was loaded?", spec.CSV, spec.Names[col], spec.Pos)
		}
		c := &parquetColumn{leaf: leaves[at], buf: make([]parquet.Value, parquetBuf)}
		if pc := pf.Root().Column(names[at]); pc != nil && pc.Leaf() && pc.MaxRepetitionLevel() == 0 {
			c.flat = !s.b.multi[col]
		}
		if rgs := pf.RowGroups(); len(rgs) > 0 {
			if lt := rgs[0].ColumnChunks()[c.leaf].Type().LogicalType(); lt != nil {
				if it, ok := lt.Value.(*format.IntType); ok && !it.IsSigned {
					c.unsigned = true
				}
			}
		}
		s.cur = append(s.cur, c)
	}
	p.where = func() string { return fmt.Sprintf("%s: row %d", spec.CSV, s.n) }
	return s, nil
}

func (s *parquetSource) close() error {
	for _, c := range s.cur {
		c.release()
	}
	return s.f.Close()
}

// pos estimates the bytes read: the file's share of the rows read.
func (s *parquetSource) pos() int64 {
	if rows := s.pf.NumRows(); rows > 0 {
		return s.size * s.n / rows
	}
	return 0
}

func (s *parquetSource) held() int64 {
	var n int64
	for _, c := range s.cur {
		n += int64(24 * cap(c.buf))
		if c.page != nil {
			n += c.page.Size()
		}
	}
	return n + int64(cap(s.b.arena)+24*cap(s.b.values))
}

func (s *parquetSource) rewind() error {
	for _, c := range s.cur {
		c.release()
		c.rg, c.at, c.n = -1, 0, 0
	}
	s.n = 0
	return nil
}

func (c *parquetColumn) release() {
	if c.page != nil {
		parquet.Release(c.page)
		c.page, c.vals = nil, nil
	}
	if c.pages != nil {
		c.pages.Close()
		c.pages = nil
	}
}

// fill reads the column's next values into buf; false at the file's end.
func (c *parquetColumn) fill(pf *parquet.File) (bool, error) {
	for {
		if c.vals != nil {
			n, err := c.vals.ReadValues(c.buf)
			if n > 0 {
				c.at, c.n = 0, n
				return true, nil
			}
			if err != nil && err != io.EOF {
				return false, err
			}
			parquet.Release(c.page)
			c.page, c.vals = nil, nil
		}
		if c.pages != nil {
			page, err := c.pages.ReadPage()
			if err == nil {
				c.page, c.vals = page, page.Values()
				continue
			}
			if err != io.EOF {
				return false, err
			}
			c.pages.Close()
			c.pages = nil
		}
		c.rg++
		rgs := pf.RowGroups()
		if c.rg >= len(rgs) {
			return false, nil
		}
		c.pages = rgs[c.rg].ColumnChunks()[c.leaf].Pages()
	}
}

// next returns the values of the column's next row (a null is none):
// calls fn with each; false at the file's end.
func (c *parquetColumn) next(pf *parquet.File, fn func(v *parquet.Value)) (bool, error) {
	first := true
	for {
		if c.at == c.n {
			ok, err := c.fill(pf)
			if err != nil {
				return false, err
			}
			if !ok {
				return !first, nil
			}
		}
		v := &c.buf[c.at]
		if !first && v.RepetitionLevel() == 0 { // the next row's
			return true, nil
		}
		first = false
		c.at++
		if !v.IsNull() {
			fn(v)
		}
	}
}

func (s *parquetSource) skip() (bool, error) {
	any := false
	for _, c := range s.cur {
		ok, err := c.next(s.pf, func(*parquet.Value) {})
		if err != nil {
			return false, fmt.Errorf("%s: row %d: %w", s.spec.CSV, s.n+1, err)
		}
		any = any || ok
	}
	if any {
		s.n++
	}
	return any, nil
}

func (s *parquetSource) row(out *rowOut) (bool, error) {
	b := s.b
	b.start(0, 0)
	any := false
	for i, c := range s.cur {
		col := b.read[i]
		if c.flat { // the next value, as next would give it
			if c.at == c.n {
				ok, err := c.fill(s.pf)
				if err != nil {
					return false, fmt.Errorf("%s: row %d: %w", s.spec.CSV, s.n+1, err)
				}
				if !ok {
					continue
				}
			}
			v := &c.buf[c.at]
			c.at++
			any = true
			if !v.IsNull() && !s.typed(c, col, v) {
				if v.Kind() == parquet.ByteArray || v.Kind() == parquet.FixedLenByteArray {
					// in place: the page holding it stays until the column's
					// next fill, the next row's
					b.p.fields[col] = v.ByteArray()
				} else {
					b.p.fields[col] = s.text(c, v)
				}
			}
			continue
		}
		from := len(b.values)
		ok, err := c.next(s.pf, func(v *parquet.Value) {
			if !s.typed(c, col, v) {
				b.values = append(b.values, s.text(c, v))
			}
		})
		if err != nil {
			return false, fmt.Errorf("%s: row %d: %w", s.spec.CSV, s.n+1, err)
		}
		any = any || ok
		if !ok {
			continue
		}
		if err := b.set(col, from, s.p.where); err != nil {
			return false, err
		}
	}
	if !any {
		return false, nil
	}
	s.n++
	return true, s.p.parseFields(int(s.n), out)
}

// typed gives column col value v as a number where the row takes it so
// (binaryRow.typedInt): an integer, a boolean as 0 or 1, a float that is a
// small integer; false: give it as text.
func (s *parquetSource) typed(c *parquetColumn, col int, v *parquet.Value) bool {
	b := s.b
	switch v.Kind() {
	case parquet.Boolean:
		if v.Boolean() {
			return b.typedInt(col, 1)
		}
		return b.typedInt(col, 0)
	case parquet.Int32:
		if c.unsigned {
			return b.typedInt(col, int64(uint32(v.Int32())))
		}
		return b.typedInt(col, int64(v.Int32()))
	case parquet.Int64:
		return !c.unsigned && b.typedInt(col, v.Int64())
	case parquet.Float:
		return b.typedFloat(col, v.Float())
	}
	return false
}

// text is a value's text: an integer's or a float's shortest decimal, a
// boolean as 0 or 1, bytes as they are (copied: a page goes when the next
// is read).
func (s *parquetSource) text(c *parquetColumn, v *parquet.Value) []byte {
	b := s.b
	switch v.Kind() {
	case parquet.Boolean:
		if v.Boolean() {
			return b.appendInt(1)
		}
		return b.appendInt(0)
	case parquet.Int32:
		if c.unsigned {
			return b.appendInt(int64(uint32(v.Int32())))
		}
		return b.appendInt(int64(v.Int32()))
	case parquet.Int64:
		if c.unsigned {
			n := len(b.arena)
			b.arena = strconv.AppendUint(b.arena, v.Uint64(), 10)
			return b.arena[n:len(b.arena):len(b.arena)]
		}
		return b.appendInt(v.Int64())
	case parquet.Float:
		return b.appendFloat(float64(v.Float()), 32)
	case parquet.Double:
		return b.appendFloat(v.Double(), 64)
	}
	n := len(b.arena)
	b.arena = append(b.arena, v.ByteArray()...)
	return b.arena[n:len(b.arena):len(b.arena)]
}
