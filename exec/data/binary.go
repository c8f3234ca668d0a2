package data

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data/tfrecord"
)

// binaryRow is where a tfrecord or parquet reader puts a row's values for
// the row parser: each column the model reads gets its value as text (a
// number formatted as its shortest decimal, so that a number reads as it
// would from a CSV) or bytes, and a column of a multi-valued spec its
// list of values.
type binaryRow struct {
	p     *rowParser
	read  []int  // the columns the model reads
	multi []bool // by column: read by a multi-valued spec (max_len)
	sep   []bool // by column: and that spec splits a text value (separator)
	// typable is, by column, whether an integer of it may be given as
	// one (p.ints) rather than as text.
	typable []bool
	arena   []byte // the text of the row's numbers
	values  [][]byte
}

func newBinaryRow(spec *dsl.Data, p *rowParser) *binaryRow {
	n := max(len(spec.Names), p.need)
	b := &binaryRow{p: p, multi: make([]bool, n), sep: make([]bool, n), typable: typedCols(spec, n)}
	p.fields, p.lists, p.ints, p.isInt = make([][]byte, n), make([][][]byte, n), make([]int64, n), make([]bool, n)
	seen := make([]bool, n)
	for _, c := range spec.Columns() {
		for _, col := range c.Cols {
			if !seen[col] {
				seen[col] = true
				b.read = append(b.read, col)
			}
		}
	}
	for _, c := range spec.IDs {
		if c.MaxLen > 0 {
			for _, col := range c.Cols {
				b.multi[col], b.sep[col] = true, c.Separator != 0
			}
		}
	}
	return b
}

// start readies the row for values taking about size bytes of text and
// count values. The slices given out stay valid while the row is filled
// (a buffer that grows leaves the old one to them); sizing them right
// spares the growing.
func (b *binaryRow) start(size, count int) {
	if cap(b.arena) < size {
		b.arena = make([]byte, 0, 2*size)
	}
	if cap(b.values) < count {
		b.values = make([][]byte, 0, 2*count)
	}
	b.arena, b.values = b.arena[:0], b.values[:0]
	p := b.p
	if 2*len(b.read) >= len(p.fields) {
		// most columns read (the CTR example's 40 of 40): memclrs
		// take a fraction of the time of a loop's stores column by column
		// (about 75 ns a row in a profile of the tfrecord bench, against
		// about 200)
		clear(p.fields)
		clear(p.lists)
		clear(p.isInt)
		clear(p.hashed) // parquet's; nil for tfrecord
		return
	}
	for _, col := range b.read {
		p.fields[col], p.lists[col], p.isInt[col] = nil, nil, false
		if p.hashed != nil {
			p.hashed[col] = hashedValue{}
		}
	}
}

// typedInt gives column col an integer as its value (in b.values a nil
// placeholder, so that set counts it), where the column takes one; false:
// give it as text.
func (b *binaryRow) typedInt(col int, x int64) bool {
	if !b.typable[col] {
		return false
	}
	b.p.ints[col], b.p.isInt[col] = x, true
	b.values = append(b.values, nil)
	return true
}

// typedFloat is typedInt for a float32 that is an integer below 2^24 in
// magnitude (a count held as a float): its text ("3", "-0", "1e+06")
// parses to that integer's value. Other floats go as text: parsing a
// float32's shortest text as a float64 and rounding that to float32 does
// not always give the float32 back (7.038531e-26, bits 0x15ae43fd: twice
// rounded), and the text's reading is the one every format shares.
func (b *binaryRow) typedFloat(col int, x float32) bool {
	if !(x > -(1<<24) && x < 1<<24) || x != float32(int32(x)) {
		return false
	}
	return b.typedInt(col, int64(x))
}

// appendInt and appendFloat write a number's text into the arena.
func (b *binaryRow) appendInt(x int64) []byte {
	n := len(b.arena)
	b.arena = strconv.AppendInt(b.arena, x, 10)
	return b.arena[n:len(b.arena):len(b.arena)]
}

func (b *binaryRow) appendFloat(x float64, bits int) []byte {
	n := len(b.arena)
	b.arena = strconv.AppendFloat(b.arena, x, 'g', -1, bits)
	return b.arena[n:len(b.arena):len(b.arena)]
}

// set gives column col its values (b.values[from:]): one is its field
// (a multi-valued column with a separator splits it), several (or none)
// a multi-valued column's list, or an error for a column read one value
// a row.
func (b *binaryRow) set(col, from int, where func() string) error {
	vals := b.values[from:len(b.values):len(b.values)]
	switch {
	case b.multi[col] && (len(vals) != 1 || !b.sep[col]):
		b.p.lists[col] = vals
	case len(vals) == 1:
		b.p.fields[col] = vals[0]
	case len(vals) > 1:
		return fmt.Errorf("%s: %s holds %d values, and the model reads one value of it a row; read it with an ids spec with max_len: N (a multi-valued column, the first N values) (data at %s)", where(), b.p.colName(col), len(vals), b.p.spec.Pos)
	}
	return nil
}

// tfrecordSource is a TFRecord file's rows: its tf.Example records, each
// feature a column named by its key.
type tfrecordSource struct {
	spec *dsl.Data
	f    *os.File
	cnt  countReader
	br   *bufio.Reader
	r    *tfrecord.Reader
	p    *rowParser
	row_ *binaryRow
	// keys gives each feature the model reads its column (a feature's
	// key is its column's name), learning where records list them; vals
	// is a record's such features.
	keys *tfrecord.Keys
	vals []tfrecord.Value
	sink tfrecord.Sink // the row's fields and typed integers
	n    int64         // the record being read (from 1)
}

// countReader counts the bytes read from a file.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

func openTFRecord(spec *dsl.Data, p *rowParser, buffer int) (rowSource, error) {
	f, err := os.Open(spec.CSV)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot open data file: %w", spec.CSV, err)
	}
	s := &tfrecordSource{spec: spec, f: f, br: bufio.NewReaderSize(f, buffer), p: p, row_: newBinaryRow(spec, p)}
	cols := map[string]int{} // a feature's key: its column, for those the model reads
	for _, col := range s.row_.read {
		cols[spec.Names[col]] = col
	}
	s.keys = tfrecord.NewKeys(func(key []byte) int {
		if col, ok := cols[string(key)]; ok {
			return col
		}
		return -1
	})
	s.sink.IntOK = s.row_.typable
	p.where = func() string { return fmt.Sprintf("%s: record %d", spec.CSV, s.n) }
	return s, nil
}

func (s *tfrecordSource) close() error { return s.f.Close() }
func (s *tfrecordSource) pos() int64   { return s.cnt.n }

func (s *tfrecordSource) rewind() error {
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("%s: %w", s.spec.CSV, err)
	}
	s.cnt = countReader{r: s.f}
	r, err := tfrecord.NewReader(&s.cnt, s.br)
	if err != nil {
		return fmt.Errorf("%s: %w", s.spec.CSV, err)
	}
	s.r, s.n = r, 0
	return nil
}

func (s *tfrecordSource) next() ([]byte, error) {
	rec, err := s.r.Next()
	if err == io.EOF {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.spec.CSV, err)
	}
	s.n++
	return rec, nil
}

func (s *tfrecordSource) skip() (bool, error) {
	rec, err := s.next()
	return rec != nil, err
}

func (s *tfrecordSource) row(out *rowOut) (bool, error) {
	rec, err := s.next()
	if err != nil || rec == nil {
		return false, err
	}
	b := s.row_
	b.start(24*len(rec)+64, len(rec)+1)
	// the features the model reads, in the record's order; on a corrupt
	// one Decode gives those before it, whose values are read first: the
	// error is the first that reading feature by feature would meet
	// a feature's one string goes straight to its column's field (a
	// multi-valued column's too: one value, split at its separator if it
	// has one, as the loop below gives it), and its one integer to its
	// column's, where the column takes one (typable)
	s.sink.Raw, s.sink.Int, s.sink.Got = b.p.fields, b.p.ints, b.p.isInt
	vals, derr := s.keys.Decode(rec, s.vals[:0], &s.sink)
	s.vals = vals[:0]
	fields, multi := b.p.fields, b.multi
	for i := range vals {
		v := &vals[i]
		col := v.Slot
		if v.One && !multi[col] { // its one value, as the loop below would give it
			switch v.Kind {
			case tfrecord.Bytes:
				fields[col] = v.Raw(rec)
			case tfrecord.Int64:
				if !b.typedInt(col, int64(v.X)) {
					fields[col] = b.appendInt(int64(v.X))
				}
			default:
				if x := tfrecord.Float32(v.X); !b.typedFloat(col, x) {
					fields[col] = b.appendFloat(float64(x), 32)
				}
			}
			continue
		}
		from := len(b.values)
		vs := v.Values(rec)
		for {
			raw, x, more, err := vs.Next()
			if err != nil {
				return false, fmt.Errorf("%s: feature %q: %w", s.p.where(), s.spec.Names[col], err)
			}
			if !more {
				break
			}
			switch vs.Kind {
			case tfrecord.Bytes:
				b.values = append(b.values, raw)
			case tfrecord.Int64:
				if !b.typedInt(col, int64(x)) {
					b.values = append(b.values, b.appendInt(int64(x)))
				}
			case tfrecord.Float:
				if f := tfrecord.Float32(x); !b.typedFloat(col, f) {
					b.values = append(b.values, b.appendFloat(float64(f), 32))
				}
			}
		}
		if err := b.set(col, from, s.p.where); err != nil {
			return false, err
		}
	}
	if derr != nil {
		return false, fmt.Errorf("%s: %w", s.p.where(), derr)
	}
	return true, s.p.parseFields(int(s.n), out)
}
