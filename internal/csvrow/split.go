package csvrow

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Error is a quoting problem in a record: Line is the record's physical
// line it is on, counted from the record's first (0), and Col the byte
// column on that line, from 1.
type Error struct {
	Line, Col int
	Msg       string
}

func (e *Error) Error() string { return e.Msg }

// At is the error placed in a file whose record starts at line first:
// "LINE:COL: message".
func (e *Error) At(first int) string {
	return fmt.Sprintf("%d:%d: %s", first+e.Line, e.Col, e.Msg)
}

// Splitter splits records into fields, reusing its buffers: splitting an
// unquoted record allocates nothing, and a quoted one nothing once the
// buffers have grown to the longest record.
type Splitter struct {
	Delim  byte
	Fields [][]byte
	buf    []byte // the unescaped text of quoted fields
}

// Split cuts rec (a record without its final newline) into s.Fields at
// the delimiter, each field trimmed of white space (space, tab, CR, LF,
// VT, FF; never the delimiter) and a quoted field unquoted. The fields
// stay valid until the next call.
func (s *Splitter) Split(rec []byte) error {
	s.Fields = s.Fields[:0]
	if bytes.IndexByte(rec, '"') < 0 {
		s.splitPlain(rec)
		return nil
	}
	return s.splitQuoted(rec)
}

func (s *Splitter) splitPlain(line []byte) {
	// eight bytes at a time: each byte equal to the delimiter sets the top
	// bit of its byte in m (exactly: no borrow or carry crosses bytes),
	// and each set bit ends a field; a Criteo row's fields are a few bytes
	// long, so this finds several a word where bytes.IndexByte was called
	// once a field
	const lo7, ones = 0x7f7f7f7f7f7f7f7f, 0x0101010101010101
	d := ones * uint64(s.Delim)
	start, i := 0, 0
	for ; i+8 <= len(line); i += 8 {
		x := binary.LittleEndian.Uint64(line[i:]) ^ d
		for m := ^((x&lo7 + lo7) | x | lo7); m != 0; m &= m - 1 {
			end := i + bits.TrailingZeros64(m)/8
			s.add(line[start:end])
			start = end + 1
		}
	}
	for ; i < len(line); i++ {
		if line[i] == s.Delim {
			s.add(line[start:i])
			start = i + 1
		}
	}
	s.add(line[start:])
}

// add appends field f, trimmed.
func (s *Splitter) add(f []byte) {
	if len(f) > 0 && (f[0] <= ' ' || f[len(f)-1] <= ' ') {
		f = Trim(f, s.Delim)
	}
	s.Fields = append(s.Fields, f)
}

// splitQuoted is the RFC 4180 state machine: a field whose first
// non-space byte is a quote runs to the next lone quote, "" standing for
// one quote; after it only spaces may come before the delimiter. A quote
// inside an unquoted field is taken as it is (as most readers do).
func (s *Splitter) splitQuoted(rec []byte) error {
	if cap(s.buf) < len(rec) {
		s.buf = make([]byte, 0, len(rec)) // never grown below: fields point into it
	}
	s.buf = s.buf[:0]
	i, n := 0, len(rec)
	for {
		for i < n && isSpace(rec[i], s.Delim) {
			i++
		}
		if i < n && rec[i] == '"' {
			open := i
			start := len(s.buf)
			i++
			for {
				j := bytes.IndexByte(rec[i:], '"')
				if j < 0 {
					return errAt(rec, open, "a quoted field starts here and is not closed: the record ends inside it; close the quote, or double a quote inside the field (\"\")")
				}
				s.buf = append(s.buf, rec[i:i+j]...)
				i += j + 1
				if i < n && rec[i] == '"' { // "" is one quote
					s.buf = append(s.buf, '"')
					i++
					continue
				}
				break
			}
			s.Fields = append(s.Fields, s.buf[start:len(s.buf):len(s.buf)])
			for i < n && isSpace(rec[i], s.Delim) {
				i++
			}
			switch {
			case i == n:
				return nil
			case rec[i] == s.Delim:
				i++
				continue
			}
			return errAt(rec, i, fmt.Sprintf("%q after the closing quote of a field; only the delimiter may follow it: put the whole field in quotes and double the quotes inside (\"\")", rune(rec[i])))
		}
		f := rec[i:]
		j := bytes.IndexByte(f, s.Delim)
		if j >= 0 {
			f = f[:j]
		}
		s.Fields = append(s.Fields, Trim(f, s.Delim))
		if j < 0 {
			return nil
		}
		i += j + 1
	}
}

// errAt is an Error at byte off of rec.
func errAt(rec []byte, off int, msg string) *Error {
	line := bytes.Count(rec[:off], []byte{'\n'})
	col := off - (bytes.LastIndexByte(rec[:off], '\n') + 1) + 1
	return &Error{Line: line, Col: col, Msg: msg}
}

// Open says whether rec ends inside a quoted field, so that the record
// goes on after its newline. A record without a quote is never open.
func Open(rec []byte, delim byte) bool { return openQuote(rec, delim) >= 0 }

// openQuote is the offset of the quote that opens the field rec ends
// inside, -1 when it ends outside a quoted field.
func openQuote(rec []byte, delim byte) int {
	if bytes.IndexByte(rec, '"') < 0 {
		return -1
	}
	i, n := 0, len(rec)
	for {
		for i < n && isSpace(rec[i], delim) {
			i++
		}
		if i < n && rec[i] == '"' {
			open := i
			i++
			for {
				j := bytes.IndexByte(rec[i:], '"')
				if j < 0 {
					return open
				}
				i += j + 1
				if i < n && rec[i] == '"' {
					i++
					continue
				}
				break
			}
		}
		j := bytes.IndexByte(rec[i:], delim)
		if j < 0 {
			return -1
		}
		i += j + 1
	}
}

// Trim removes the white space (space, tab, CR, LF, VT, FF) around a
// line or field, except the delimiter itself: with delimiter tab, a
// line's trailing tab separates an empty last field.
func Trim[T string | []byte](s T, delim byte) T {
	i, j := 0, len(s)
	for i < j && isSpace(s[i], delim) {
		i++
	}
	for j > i && isSpace(s[j-1], delim) {
		j--
	}
	return s[i:j]
}

func isSpace(b, delim byte) bool {
	return b != delim && (b == ' ' || b == '\t' || b == '\r' || b == '\n' || b == '\v' || b == '\f')
}
