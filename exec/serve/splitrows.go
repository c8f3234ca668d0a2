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
// is not a string, holds an escape other than the delimiter's \t, or the
// array is malformed: the caller reads it again as lines.
func (s *scanner) rowsSplit(sb *splitBufs) (*SplitRows, bool) {
	d := sb.delim
	sep, stop := int32(1), d // stop: the byte a field ends at, besides the specials
	if d == '\t' {
		sep, stop = 2, 0 // \t: a backslash, special already (NUL is a control character, special too)
	}
	bounds, at := sb.bounds[:0], sb.at[:0]
	b := s.b
	ok := s.array(func() bool {
		if s.i >= len(b) || b[s.i] != '"' {
			return false
		}
		at = append(at, int32(len(bounds)))
		i := s.i + 1
		bounds = append(bounds, int32(i))
		for {
			i = stopRun(b, i, stop)
			if i >= len(b) {
				return false
			}
			switch c := b[i]; {
			case c == '"':
				bounds = append(bounds, int32(i))
				s.i = i + 1
				return true
			case c == d && sep == 1:
				bounds = append(bounds, int32(i))
				i++
			case c == '\\' && sep == 2 && i+1 < len(b) && b[i+1] == 't':
				bounds = append(bounds, int32(i))
				i += 2
			default: // another escape, or a control character
				return false
			}
		}
	})
	at = append(at, int32(len(bounds)))
	sb.bounds, sb.at = bounds, at
	if !ok {
		return nil, false
	}
	sb.rows = SplitRows{body: b, delim: d, sep: sep, bounds: bounds, at: at}
	return &sb.rows, true
}

// stopRun is where the string's run from i ends: the index of its first
// quote, backslash, control character or byte d, or len(b). Eight bytes
// at a time, as plainRun.
func stopRun(b []byte, i int, d byte) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	dd := ones * uint64(d)
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		y := x ^ dd
		if m := specialBytes(x) | (y-ones)&^y&highs; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for i < len(b) && !special[b[i]] && b[i] != d {
		i++
	}
	return i
}
