package serve

import (
	"encoding/binary"
	"math/bits"

	"github.com/psgraph/psgraph/internal/csvrow"
)

// SplitRows are a request's rows cut into their fields while the body was
// read (fastWire, for a model whose delimiter is a tab or a printable
// byte): each row a run of the body, its fields between its delimiters,
// which are \t escapes (a TSV row) or the delimiter itself. A row is cut
// so only when every escape in it is the delimiter's \t: its fields then
// hold no escape, and are the bytes of the line encoding/json decodes,
// cut where csvrow.Splitter (the data files' splitter, which
// data.LineParser.Parse runs) cuts it. Any other escape (a quote, which
// would start a quoted field, a \\, a \n) leaves the whole request's rows
// to be decoded as lines (Request.Lines). Nothing is copied: the rows of a
// TSV request are not decoded into a buffer and then searched for their
// tabs, as a line would be, but read once.
type SplitRows struct {
	body  []byte
	delim byte
	sep   int32 // the delimiter's bytes in the body: 2 for \t, else 1
	// bounds are, for each row, where its first field starts and then
	// where each of its fields ends (body offsets); row i's are
	// bounds[at[i]:at[i+1]]
	bounds, at []int32
}

// Rows is how many rows there are.
func (s *SplitRows) Rows() int { return len(s.at) - 1 }

// Fields appends row i's fields to dst, each trimmed of white space as
// csvrow.Splitter trims it.
func (s *SplitRows) Fields(i int, dst [][]byte) [][]byte {
	b := s.bounds[s.at[i]:s.at[i+1]]
	start := b[0]
	for _, end := range b[1:] {
		f := s.body[start:end:end]
		if len(f) > 0 && (f[0] <= ' ' || f[len(f)-1] <= ' ') {
			f = csvrow.Trim(f, s.delim)
		}
		dst = append(dst, f)
		start = end + s.sep
	}
	return dst
}

// Line is row i as encoding/json decodes it: its fields as the body holds
// them, joined by the delimiter (a new slice).
func (s *SplitRows) Line(i int) []byte {
	b := s.bounds[s.at[i]:s.at[i+1]]
	var l []byte
	start := b[0]
	for k, end := range b[1:] {
		if k > 0 {
			l = append(l, s.delim)
		}
		l = append(l, s.body[start:end]...)
		start = end + s.sep
	}
	return l
}

// Raw is row i as the body holds it when it has a single field (no
// delimiter, so no escape): the line itself; nil for a row of several.
func (s *SplitRows) Raw(i int) []byte {
	b := s.bounds[s.at[i]:s.at[i+1]]
	if len(b) != 2 {
		return nil
	}
	return s.body[b[0]:b[1]:b[1]]
}

// splitBufs is room for a request's SplitRows, reused from request to
// request; delim is the model's delimiter (0: rows are not split).
type splitBufs struct {
	delim      byte
	rows       SplitRows
	bounds, at []int32
}

// splits says whether rows of delimiter d can be cut as the body is read:
// a tab (written \t in JSON) or a byte JSON writes as itself and never as
// part of an escape or of a multi-byte character.
func splits(d byte) bool {
	return d == '\t' || d > ' ' && d < 0x80 && d != '"' && d != '\\'
}

// rowsSplit reads the data array of the rows input from s's position as
// split rows into sb; false (s's position then undefined) if an element
// is not a string, holds an escape other than the delimiter's \t or a
// control character, or the array is malformed: the caller reads it
// again as lines.
func (s *scanner) rowsSplit(sb *splitBufs) (*SplitRows, bool) {
	d := sb.delim
	sep := int32(1)
	if d == '\t' {
		sep = 2
	}
	bounds, at := sb.bounds[:0], sb.at[:0]
	b := s.b
	ok := s.array(func() bool {
		if s.i >= len(b) || b[s.i] != '"' {
			return false
		}
		at = append(at, int32(len(bounds)))
		var ok bool
		s.i, bounds, ok = splitRow(b, s.i+1, d, bounds)
		return ok
	})
	at = append(at, int32(len(bounds)))
	sb.bounds, sb.at = bounds, at
	if !ok {
		return nil, false
	}
	sb.rows = SplitRows{body: b, delim: d, sep: sep, bounds: bounds, at: at}
	return &sb.rows, true
}

// splitRow reads the row whose string starts at b[i] (past its quote):
// appends to bounds where its first field starts and where each field
// ends, and answers where the string ends (past its quote); false if it
// holds a control character or an escape other than the delimiter's \t,
// or does not end. Eight bytes at a time, each word read once: every byte
// that ends a field or the string is flagged exactly (stops), and each is
// taken in order.
func splitRow(b []byte, i int, d byte, bounds []int32) (int, []int32, bool) {
	bounds = append(bounds, int32(i))
	for ; i+8 <= len(b); i += 8 {
		for m := stops(binary.LittleEndian.Uint64(b[i:]), d); m != 0; m &= m - 1 {
			k := i + bits.TrailingZeros64(m)/8
			bounds = append(bounds, int32(k))
			if c := b[k]; c == '"' {
				return k + 1, bounds, true
			} else if !fieldEnd(b, k, c, d) {
				return 0, bounds, false
			}
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; special[c] || c == d {
			bounds = append(bounds, int32(i))
			if c == '"' {
				return i + 1, bounds, true
			} else if !fieldEnd(b, i, c, d) {
				return 0, bounds, false
			}
		}
	}
	return 0, bounds, false
}

// fieldEnd says whether c, at b[k], ends a field: it is the delimiter
// (not a tab, which is written \t), or the backslash of a \t (whose t is
// never flagged) for a tab.
func fieldEnd(b []byte, k int, c, d byte) bool {
	if d == '\t' {
		return c == '\\' && k+1 < len(b) && b[k+1] == 't'
	}
	return c == d
}

// stops flags, in the top bit of each byte, exactly the bytes of the word
// w (little-endian) that stop a row's run: a quote, a backslash, a
// control character, the delimiter d. A byte y is zero exactly when the
// top bit of (y&lo7 + lo7) | y is clear (no carry crosses bytes): a byte
// is flagged when that bit is clear for any of the four.
func stops(w uint64, d byte) uint64 {
	const ones, lo7, highs = 0x0101010101010101, 0x7f7f7f7f7f7f7f7f, 0x8080808080808080
	q, bs, dl, ctl := w^ones*'"', w^ones*'\\', w^ones*uint64(d), w&(ones*0xe0)
	return highs &^ (((q&lo7 + lo7) | q) & ((bs&lo7 + lo7) | bs) & ((dl&lo7 + lo7) | dl) & ((ctl&lo7 + lo7) | ctl))
}
