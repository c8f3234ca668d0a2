package data

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding"
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

// flatPage is a flat column's page read from its arrays: its rows'
// definition levels (nil: every row holds a value), and its values (vals:
// int64s or byte arrays; or dictionary indices, idx, into the
// dictionary's entries), vi the next one.
type flatPage struct {
	kind      flatKind
	defs      []byte
	maxDef    byte
	row, rows int
	vi, nv    int
	vals      flatValues
	idx       []int32
	entries   flatValues
	// the page's next rows, up to flatChunk of them, looked up a column
	// at a time (resolve) and handed out a row at a time: ch[at:n]; err,
	// the error of the row after them
	ch    *flatChunk
	at, n int
	err   error
}

// flatChunkRows is how many rows of a column resolve looks up at a time.
// A row at a time, the CTR example's 40 columns read 40 pages' arrays in
// turn (and 26 dictionaries' hashes at random), more streams than the
// cache's prefetchers follow; a column's 64 rows in one loop read each
// stream in a run.
const flatChunkRows = 64

// flatChunk is a flat column's rows, resolved: by row, its tag (null,
// an int64 or a hash in x, bytes in b).
type flatChunk struct {
	tag [flatChunkRows]uint8
	x   [flatChunkRows]uint64
	b   [flatChunkRows][]byte
}

const (
	chunkNull uint8 = iota
	chunkInt64
	chunkHash
	chunkBytes
)

type flatKind uint8

const (
	flatInt64 flatKind = iota + 1
	flatBytes
	flatDict
)

// flatValues are a page's (or a dictionary's) n values: int64s, or byte
// arrays (data cut at offs).
type flatValues struct {
	kind flatKind
	i64  []int64
	data []byte
	offs []uint32
	n    int
}

// take reads v's arrays; false: values of another kind.
func (fv *flatValues) take(v encoding.Values) bool {
	switch v.Kind() {
	case encoding.Int64:
		fv.kind, fv.i64 = flatInt64, v.Int64()
		fv.n = len(fv.i64)
	case encoding.ByteArray:
		fv.kind = flatBytes
		fv.data, fv.offs = v.ByteArray()
		fv.n = len(fv.offs) - 1
	default:
		return false
	}
	return fv.n >= 0
}

// bytes is byte array i.
func (fv *flatValues) bytes(i int) []byte { return fv.data[fv.offs[i]:fv.offs[i+1]:fv.offs[i+1]] }

// parquetBuf is the values a column reads at a time: few enough that the
// buffers of 40 columns (24 bytes a value) stay in the cache, since a row
// takes one value of each in turn.
const parquetBuf = 128

// parquetColumn reads one leaf column's values, row by row.
type parquetColumn struct {
	leaf     int
	unsigned bool // an unsigned integer's logical type
	// flat: the column holds one value a row (or a null), not a list; its
	// values are read in place, one a row, from the page's arrays where
	// the page is of int64s or byte arrays, plain or dictionary-encoded
	// (flatPage), else as the others' are
	flat bool
	flatPage
	// hashed: the column's bytes are given hashed from seed (hashedCols):
	// a dictionary's entries are hashed once (hashes, of dict)
	hashed bool
	seed   uint64
	dict   parquet.Dictionary
	hashes []uint64
	rg     int // the row group being read
	pages  parquet.Pages
	page   parquet.Page
	vals   parquet.ValueReader
	buf    []parquet.Value
	at, n  int // buf[at:n] not yet consumed
}

func openParquet(spec *dsl.Data, p *rowParser) (rowSource, error) {
	ft, f, err := openParquetFile(spec.CSV)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec.CSV, err)
	}
	pf, names, leaves := ft.pf, ft.names, ft.leaves
	s := &parquetSource{spec: spec, f: f, pf: pf, p: p, b: newBinaryRow(spec, p), size: pf.Size()}
	p.hashed = make([]hashedValue, len(p.fields))
	hashed, seeds := p.hashedCols(len(p.fields))
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
			c.flat, c.maxDef = !s.b.multi[col], byte(pc.MaxDefinitionLevel())
		}
		c.hashed, c.seed = hashed[col], seeds[col]
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
	c.flatPage.row, c.flatPage.rows, c.dict = 0, 0, nil
	c.flatPage.at, c.flatPage.n, c.flatPage.err = 0, 0, nil
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
		}
		if ok, err := c.nextPage(pf, false); !ok || err != nil {
			return false, err
		}
	}
}

// nextPage moves to the column's next page: its values read from its
// arrays (c.flatPage) where flat may and the page is of a kind read so,
// else through c.vals; false at the file's end.
func (c *parquetColumn) nextPage(pf *parquet.File, flat bool) (bool, error) {
	if c.page != nil {
		parquet.Release(c.page)
		c.page, c.vals = nil, nil
	}
	c.flatPage.row, c.flatPage.rows = 0, 0
	c.flatPage.at, c.flatPage.n, c.flatPage.err = 0, 0, nil
	for {
		if c.pages != nil {
			page, err := c.pages.ReadPage()
			if err == nil {
				c.page = page
				if !flat || !c.arrays(page) {
					c.vals = page.Values()
				}
				return true, nil
			}
			if err != io.EOF {
				return false, err
			}
			c.pages.Close()
			c.pages, c.dict = nil, nil
		}
		c.rg++
		rgs := pf.RowGroups()
		if c.rg >= len(rgs) {
			return false, nil
		}
		c.pages = rgs[c.rg].ColumnChunks()[c.leaf].Pages()
	}
}

// arrays readies c.flatPage to read page from its arrays; false: the
// page is of another kind.
func (c *parquetColumn) arrays(page parquet.Page) bool {
	fp := &c.flatPage
	fp.defs = page.DefinitionLevels()
	fp.rows, fp.row, fp.vi = int(page.NumRows()), 0, 0
	if fp.defs != nil && len(fp.defs) != fp.rows {
		return false
	}
	data := page.Data()
	if d := page.Dictionary(); d != nil {
		if data.Kind() != encoding.Int32 {
			return false
		}
		if d != c.dict && !c.dictionary(d) {
			return false
		}
		fp.kind, fp.idx = flatDict, data.Int32()
		fp.nv = len(fp.idx)
		return true
	}
	if !fp.vals.take(data) {
		return false
	}
	fp.kind, fp.nv = fp.vals.kind, fp.vals.n
	return true
}

// dictionary takes d's entries (int64s or byte arrays, hashed where the
// column is given hashed) for the pages that index them; false: entries
// of another kind.
func (c *parquetColumn) dictionary(d parquet.Dictionary) bool {
	c.dict = nil
	dv := &c.flatPage.entries
	if !dv.take(d.Page().Data()) || d.Len() != dv.n {
		return false
	}
	if c.hashed && dv.kind == flatBytes {
		c.hashes = c.hashes[:0]
		for i := range dv.n {
			c.hashes = append(c.hashes, hashKey(c.seed, dv.bytes(i)))
		}
	}
	c.dict = d
	return true
}

// flatRow reads a flat column's next row into column col of the row
// (where set); false at the file's end.
func (s *parquetSource) flatRow(c *parquetColumn, col int, set bool) (bool, error) {
	b := s.b
	for {
		if c.vals != nil {
			if c.at < c.n {
				v := &c.buf[c.at]
				c.at++
				if set && !v.IsNull() && !s.typed(c, col, v) {
					if v.Kind() == parquet.ByteArray || v.Kind() == parquet.FixedLenByteArray {
						// in place: the page holding it stays until the
						// column's next page, read at a later row
						b.p.fields[col] = v.ByteArray()
					} else {
						b.p.fields[col] = s.text(c, v)
					}
				}
				return true, nil
			}
			n, err := c.vals.ReadValues(c.buf)
			if n > 0 {
				c.at, c.n = 0, n
				continue
			}
			if err != nil && err != io.EOF {
				return false, err
			}
		} else if fp := &c.flatPage; fp.at < fp.n || fp.err != nil || fp.row < fp.rows {
			if fp.at == fp.n {
				if fp.err != nil {
					err := fp.err
					fp.err = nil
					return false, err
				}
				s.resolve(c, col)
				continue
			}
			i := fp.at
			fp.at++
			if !set {
				return true, nil
			}
			switch ch := fp.ch; ch.tag[i] {
			case chunkInt64:
				s.int64Value(c, col, int64(ch.x[i]))
			case chunkHash:
				b.p.hashed[col] = hashedValue{ok: true, h: ch.x[i]}
			case chunkBytes:
				b.p.fields[col] = ch.b[i]
			}
			return true, nil
		}
		if ok, err := c.nextPage(s.pf, true); !ok || err != nil {
			return false, err
		}
	}
}

// resolve looks up the next rows of a flat column's page (up to
// flatChunkRows, and up to a row the page cannot give, whose error it
// keeps for that row) into its chunk.
func (s *parquetSource) resolve(c *parquetColumn, col int) {
	fp := &c.flatPage
	if fp.ch == nil {
		fp.ch = new(flatChunk)
	}
	ch := fp.ch
	n := min(flatChunkRows, fp.rows-fp.row)
	defs, maxDef, vi := fp.defs, fp.maxDef, fp.vi
	if defs != nil {
		defs = defs[fp.row : fp.row+n]
	}
	i := 0
	for ; i < n; i++ {
		if defs != nil && defs[i] != maxDef { // a null
			ch.tag[i] = chunkNull
			continue
		}
		if vi >= fp.nv {
			fp.err = fmt.Errorf("a page of column %q holds fewer values than its rows say: %w", s.spec.Names[col], errParquetPage)
			break
		}
		v := vi
		vi++
		switch fp.kind {
		case flatInt64:
			ch.tag[i], ch.x[i] = chunkInt64, uint64(fp.vals.i64[v])
		case flatBytes:
			ch.tag[i], ch.b[i] = chunkBytes, fp.vals.bytes(v)
		case flatDict:
			k := int(fp.idx[v])
			if k < 0 || k >= fp.entries.n {
				fp.err = fmt.Errorf("column %q: dictionary index %d past its %d entries: %w", s.spec.Names[col], k, fp.entries.n, errParquetPage)
				break
			}
			switch {
			case fp.entries.kind == flatInt64:
				ch.tag[i], ch.x[i] = chunkInt64, uint64(fp.entries.i64[k])
			case c.hashed:
				ch.tag[i], ch.x[i] = chunkHash, c.hashes[k]
			default:
				ch.tag[i], ch.b[i] = chunkBytes, fp.entries.bytes(k)
			}
		}
		if fp.err != nil {
			break
		}
	}
	fp.row += i
	fp.vi = vi
	fp.at, fp.n = 0, i
	if fp.err != nil {
		fp.row = fp.rows // the page is not read past the error
	}
}

// errParquetPage is the error of a page whose parts disagree.
var errParquetPage = errors.New("a corrupt parquet page")

// int64Value gives column col an INT64 value x: as a number where the
// row takes it so, else as its text (unsigned where its logical type
// says so), as typed and text would.
func (s *parquetSource) int64Value(c *parquetColumn, col int, x int64) {
	b := s.b
	switch {
	case c.unsigned:
		n := len(b.arena)
		b.arena = strconv.AppendUint(b.arena, uint64(x), 10)
		b.p.fields[col] = b.arena[n:len(b.arena):len(b.arena)]
	case !b.typedInt(col, x):
		b.p.fields[col] = b.appendInt(x)
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
	for i, c := range s.cur {
		var ok bool
		var err error
		if c.flat {
			ok, err = s.flatRow(c, s.b.read[i], false)
		} else {
			ok, err = c.next(s.pf, func(*parquet.Value) {})
		}
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
		if c.flat {
			ok, err := s.flatRow(c, col, true)
			if err != nil {
				return false, fmt.Errorf("%s: row %d: %w", s.spec.CSV, s.n+1, err)
			}
			any = any || ok
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

// parquetFooter is what a parquet file's footer says: parquet-go's
// reading of it (the schema, the row groups' metadata) and the columns a
// data section addresses, with each one's leaf column, as the model
// language names them (parquetschema.Fields of the same schema).
type parquetFooter struct {
	pf     *parquet.File
	names  []string
	leaves []int
}

// openParquetFile opens a parquet file and reads its footer
// (openParquetAt). Close the file when done.
func openParquetFile(path string) (*parquetFooter, *os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	ft, err := openParquetAt(f, st.Size())
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return ft, f, nil
}

// openParquetAt reads the footer of the parquet file r of size bytes,
// once: parquet-go decodes it (not the page index nor the bloom
// filters), and the columns are named from the schema it decoded.
func openParquetAt(r io.ReaderAt, size int64) (*parquetFooter, error) {
	pf, err := parquet.OpenFile(r, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, fmt.Errorf("not a parquet file that can be read: %v", err)
	}
	schema := pf.Metadata().Schema
	elems := make([]parquetschema.Element, len(schema))
	for i, e := range schema {
		elems[i] = parquetschema.Element{Name: e.Name, Children: int(e.NumChildren.V), Group: !e.Type.Valid}
	}
	names, leaves, err := parquetschema.Fields(elems)
	if err != nil {
		return nil, err
	}
	// The leaves index the row groups' column chunks: parquet-go's leaf
	// columns of the same schema, checked as the file is not trusted.
	if n := len(pf.Schema().Columns()); len(leaves) > 0 && leaves[len(leaves)-1] >= n { // leaves ascend
		return nil, fmt.Errorf("not a parquet file that can be read: parquet-go finds %d leaf columns in its schema, fewer than the %d of its fields", n, leaves[len(leaves)-1]+1)
	}
	return &parquetFooter{pf: pf, names: names, leaves: leaves}, nil
}
