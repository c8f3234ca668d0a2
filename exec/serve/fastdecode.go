package serve

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// fastWire reads the common request, whose only input is the rows, without
// encoding/json: one pass over the body, each line a slice of it, or,
// for a line with escapes, of *text, where it is written decoded (grown
// to the body's size when it is too small, and kept for the next
// request); the lines are appended to lines (the caller's, reused). It
// takes an object of "id" (a string), "inputs" (objects of "name"
// (RowsInput), "datatype", "shape" and "data", an array of strings) and
// "outputs" (objects of "name") and nothing else: for any other request
// (typed inputs, parameters, other members or a member's other spelling,
// a key given twice, null, a \u escape, invalid UTF-8 in a name) it
// answers false, and decodeRequest asks encoding/json, whose result it
// would have been (FuzzDecodeRequest checks the two agree on every body).
// It never writes the body, so encoding/json reads it as sent. encoding/json
// would scan the body three times (validate it, skip the data to keep it
// raw, then the lines' own decoding) and copy every line.
//
// With split (not nil, its delim set) the rows are cut into their fields
// as they are read (SplitRows), unless a row holds an escape other than
// the delimiter's: then they are read again as lines.
func fastWire(body []byte, lines [][]byte, text *[]byte, split *splitBufs) (wireRequest, bool) {
	lines = lines[:0]
	s := &scanner{b: body, split: split}
	if text != nil {
		s.text = (*text)[:0]
	}
	var w wireRequest
	seen := 0
	ok := s.object(func(key []byte) bool {
		var bit int
		ok := false
		switch string(key) {
		case "id":
			bit = 1
			w.ID, ok = s.name()
		case "inputs":
			bit = 2
			ok = s.array(func() bool {
				in, ok := s.input(lines[len(lines):])
				w.Inputs = append(w.Inputs, in)
				if in.parsed {
					lines = in.lines // the next input's lines after this one's
				}
				return ok
			})
		case "outputs":
			bit = 4
			ok = s.array(func() bool {
				var o wireOutput
				ok := s.object(func(key []byte) bool {
					if string(key) != "name" || o.Name != "" {
						return false
					}
					var ok bool
					o.Name, ok = s.name()
					return ok && o.Name != ""
				})
				w.Outputs = append(w.Outputs, o)
				return ok
			})
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return ok
	})
	if text != nil && cap(s.text) > cap(*text) {
		*text = s.text[:0]
	}
	if !ok || !s.end() {
		return wireRequest{}, false
	}
	return w, true
}

// input reads an input object of the rows, whose data is an array of
// strings, appended to lines.
func (s *scanner) input(lines [][]byte) (in wireInput, ok bool) {
	seen := 0
	ok = s.object(func(key []byte) bool {
		var bit int
		ok := false
		switch string(key) {
		case "name":
			bit = 1
			in.Name, ok = s.name()
		case "datatype":
			bit = 2
			in.Datatype, ok = s.name()
		case "shape":
			bit = 4
			in.Shape = make([]int64, 0, 2)
			ok = s.array(func() bool {
				d, ok := s.uint()
				in.Shape = append(in.Shape, d)
				return ok
			})
		case "data":
			bit = 8
			start := s.ws()
			if s.split != nil && s.split.delim != 0 {
				if in.split, ok = s.rowsSplit(s.split); ok {
					in.Data = s.b[start:s.i:s.i]
					in.parsed = true
					break
				}
				s.i = start // an escape of its own in a row: read them as lines
			}
			ok = s.array(func() bool {
				l, ok := s.line()
				lines = append(lines, l)
				return ok
			})
			in.Data = s.b[start:s.i:s.i] // for the checks of its presence only
			in.lines, in.parsed = lines, true
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return ok
	})
	// typed inputs, whose data are not strings, are encoding/json's
	return in, ok && in.Name == RowsInput
}

// scanner reads the JSON of fastWire. It never writes the body: the
// lines with escapes are decoded into text.
type scanner struct {
	b     []byte
	i     int
	text  []byte
	split *splitBufs // room for the rows cut into fields (nil: read lines)
}

func (s *scanner) ws() int {
	s.i = skipSpace(s.b, s.i)
	return s.i
}

func (s *scanner) next(c byte) bool {
	if s.ws() < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end says whether only white space is left.
func (s *scanner) end() bool { return s.ws() == len(s.b) }

// object reads an object, each member's value by member(key).
func (s *scanner) object(member func(key []byte) bool) bool {
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return true
	}
	for {
		key, esc, ok := s.str()
		if !ok || esc || !s.next(':') || !member(key) {
			return false // a key with an escape is no key fastWire knows as spelt
		}
		if s.next('}') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

// array reads an array, each element by elem.
func (s *scanner) array(elem func() bool) bool {
	if !s.next('[') {
		return false
	}
	if s.next(']') {
		return true
	}
	for {
		s.ws()
		if !elem() {
			return false
		}
		if s.next(']') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

// str reads a string as it is in the body (the quotes stripped); esc says
// whether it holds escapes, each one unescape decodes (not \u, which
// encoding/json decodes).
func (s *scanner) str() (str []byte, esc bool, ok bool) {
	if !s.next('"') {
		return nil, false, false
	}
	b, start := s.b, s.i
	i := start
	for ; i < len(b); i++ {
		if !special[b[i]] {
			continue
		}
		if b[i] == '"' {
			break
		}
		if b[i] < 0x20 {
			return nil, false, false
		}
		if i++; i >= len(b) || !simpleEscape(b[i]) { // a backslash
			return nil, false, false
		}
		esc = true
	}
	if i >= len(b) {
		return nil, false, false
	}
	s.i = i + 1
	return b[start:i:i], esc, true
}

// line reads a string of the rows' data, decoded: a slice of the body
// if it holds no escape, else of s.text, where it is written with its
// escapes decoded (a \u escape, which encoding/json decodes, is refused).
// One pass: each byte is read once; past the first escape the string is
// copied eight bytes at a time, each word stored whole (s.text has room
// for 8 bytes past the body's length) and the written length advanced to
// its first special byte.
func (s *scanner) line() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	b, start := s.b, s.i
	i := plainRun(b, start)
	if i >= len(b) || b[i] < 0x20 {
		return nil, false
	}
	if b[i] == '"' {
		s.i = i + 1
		return b[start:i:i], true
	}
	if cap(s.text) < len(b)+8 { // the lines decoded are never longer than the body
		s.text = make([]byte, 0, len(b)+8)
	}
	t0 := len(s.text)
	t := s.text[:cap(s.text)]
	w := t0 + copy(t[t0:], b[start:i])
	for {
		// b[i] is a backslash
		if i++; i >= len(b) {
			return nil, false
		}
		c, ok := escaped(b[i])
		if !ok {
			return nil, false
		}
		t[w] = c
		i, w = i+1, w+1
		for i+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[i:])
			binary.LittleEndian.PutUint64(t[w:], x)
			if m := specialBytes(x); m != 0 {
				k := bits.TrailingZeros64(m) / 8
				i, w = i+k, w+k
				goto special
			}
			i, w = i+8, w+8
		}
		for i < len(b) && !special[b[i]] {
			t[w] = b[i]
			i, w = i+1, w+1
		}
		if i >= len(b) {
			return nil, false
		}
	special:
		if b[i] == '"' {
			break
		}
		if b[i] < 0x20 {
			return nil, false
		}
	}
	s.i, s.text = i+1, t[:w]
	return t[t0:w:w], true
}

// plainRun is where the string's plain run from i ends: the index of its
// first quote, backslash or control character, or len(b).
func plainRun(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		if m := specialBytes(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for i < len(b) && !special[b[i]] {
		i++
	}
	return i
}

// specialBytes flags the bytes of the word w (little-endian) that end a
// plain run: below 0x20, '"' or '\\' sets the top bit of its byte. The
// lowest byte flagged is the first such (a borrow flags only bytes
// after it).
func specialBytes(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q, bs := w^(ones*'"'), w^(ones*'\\')
	return ((w - ones*0x20) | (q - ones) | (bs - ones)) &^ w & highs
}

// special are the bytes that end a string's plain run: a quote, a
// backslash, a control character (which JSON does not allow in a string).
var special = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

func simpleEscape(c byte) bool {
	switch c {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return true
	}
	return false
}

// name reads a string that is a name (an id, an input's name or
// datatype, an output's name): valid UTF-8, as encoding/json would leave
// it; the names of the protocol without an allocation.
func (s *scanner) name() (string, bool) {
	v, esc, ok := s.str()
	if !ok || !utf8.Valid(v) {
		return "", false
	}
	if esc {
		v, _ = unescape(append([]byte(nil), v...))
	}
	switch string(v) {
	case RowsInput:
		return RowsInput, true
	case dtBytes:
		return dtBytes, true
	}
	return string(v), true
}

// uint reads a non-negative integer of at most 18 digits, in JSON's
// form (no leading zero).
func (s *scanner) uint() (int64, bool) {
	b, i := s.b, s.ws()
	var n int64
	start := i
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9' && i-start < 18; i++ {
		n = n*10 + int64(b[i]-'0')
	}
	if i == start || b[start] == '0' && i-start > 1 || i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E' || b[i] >= '0' && b[i] <= '9') {
		return 0, false
	}
	s.i = i
	return n, true
}

// stringArray decodes a flat JSON array of strings into out, each string
// a slice of data, its escapes decoded in place (data is the request's
// own copy); false if data is anything else (or holds a \u escape). It
// is the rows input's fast path when fastWire could not read the request:
// encoding/json would scan the array twice more and copy every line.
func stringArray(data []byte, out [][]byte) ([][]byte, bool) {
	s := &scanner{b: data}
	esc := false
	ok := s.array(func() bool {
		l, e, ok := s.str()
		out, esc = append(out, l), esc || e
		return ok
	})
	if !ok || !s.end() {
		return nil, false
	}
	if esc {
		for i, l := range out {
			out[i], _ = unescape(l) // checked by str
		}
	}
	return out, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// unescape decodes a JSON string's escapes (the quotes stripped) in
// place; false for a malformed one or a \u escape, which encoding/json
// decodes (scanner.str checks them first).
func unescape(s []byte) ([]byte, bool) {
	i := bytes.IndexByte(s, '\\')
	if i < 0 {
		return s, true
	}
	out := s[:i] // never longer than s: it is written behind the reads
	for ; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		if i++; i >= len(s) {
			return nil, false
		}
		var ok bool
		if c, ok = escaped(s[i]); !ok {
			return nil, false
		}
		out = append(out, c)
	}
	return out, true
}

// escaped is the byte a JSON string's escape \c stands for; false for
// \u (which the callers leave to encoding/json) and for any c JSON has no
// escape for.
func escaped(c byte) (byte, bool) {
	switch c {
	case '"', '\\', '/':
		return c, true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	}
	return 0, false
}
