package csvrow

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

// MaxRecord bounds the length of one record (a line, or the lines of a
// record with a quoted newline).
const MaxRecord = 1 << 26

// Reader reads the records of a delimited text file: its lines, except
// that a quoted field holding a newline joins the lines it spans into one
// record. It copies nothing of a record that fits one buffered line.
type Reader struct {
	r     *bufio.Reader
	delim byte
	long  []byte // a line longer than the buffer, assembled
	rec   []byte // a record of several lines, assembled
	// Line is the number of the last physical line read (from 1), Start
	// the line a record last returned by Next starts at, and Pos the bytes
	// read.
	Line, Start int
	Pos         int64
}

// NewReader reads records from r, fields separated by delim.
func NewReader(r *bufio.Reader, delim byte) *Reader { return &Reader{r: r, delim: delim} }

// Reset reads from r anew, counting lines and bytes from 0.
func (l *Reader) Reset(r io.Reader) {
	l.r.Reset(r)
	l.Line, l.Start, l.Pos = 0, 0, 0
}

// line returns the next physical line, its newline included.
func (l *Reader) line() ([]byte, error) {
	b, err := l.r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		l.long = append(l.long[:0], b...)
		for err == bufio.ErrBufferFull {
			if len(l.long) > MaxRecord {
				return nil, fmt.Errorf("line %d is longer than %d MiB; is this a text data file?", l.Line+1, MaxRecord>>20)
			}
			b, err = l.r.ReadSlice('\n')
			l.long = append(l.long, b...)
		}
		b = l.long
	}
	switch {
	case err == io.EOF && len(b) == 0:
		return nil, io.EOF
	case err != nil && err != io.EOF:
		return nil, err
	}
	l.Line++
	l.Pos += int64(len(b))
	return b, nil
}

// Next returns the next record, its final newline included; the slice is
// valid until the next call. It returns io.EOF after the last record, and
// an *Error (Line counted from Start) for a quoted field the file ends in.
func (l *Reader) Next() ([]byte, error) {
	b, err := l.line()
	if err != nil {
		return nil, err
	}
	l.Start = l.Line
	if !Open(b, l.delim) {
		return b, nil
	}
	l.rec = append(l.rec[:0], b...)
	for {
		at := openQuote(l.rec, l.delim)
		if at < 0 {
			return l.rec, nil
		}
		if len(l.rec) > MaxRecord {
			e := errAt(l.rec, at, fmt.Sprintf("a quoted field starts here and is not closed within %d MiB; close the quote, or double a quote inside the field (\"\")", MaxRecord>>20))
			return nil, e
		}
		b, err := l.line()
		if err == io.EOF {
			return nil, errAt(l.rec, at, "a quoted field starts here and is not closed: the file ends inside it; close the quote, or double a quote inside the field (\"\")")
		}
		if err != nil {
			return nil, err
		}
		l.rec = append(l.rec, b...)
	}
}

// Skip passes over the next record and says whether it holds a row (is
// not blank). It returns io.EOF after the last record.
func (l *Reader) Skip() (bool, error) {
	b, err := l.Next()
	if err != nil {
		return false, err
	}
	return len(Trim(b, l.delim)) > 0, nil
}

// Held is the bytes the reader holds: its buffer and the records it
// assembled.
func (l *Reader) Held() int { return l.r.Size() + cap(l.long) + cap(l.rec) }

// Header reads the header line of the delimited text file at path: its
// first non-blank record, split at delim into its fields, and the line it
// starts at. A file without one gives io.EOF; a quoting problem gives an
// *Error and the line its record starts at (Error.At places it).
func Header(path string, delim byte) ([]string, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	lr := NewReader(bufio.NewReaderSize(f, 64<<10), delim)
	sp := Splitter{Delim: delim}
	for {
		rec, err := lr.Next()
		if err != nil {
			return nil, lr.Start, err
		}
		if line := Trim(rec, delim); len(line) > 0 {
			if err := sp.Split(line); err != nil {
				return nil, lr.Start, err
			}
			names := make([]string, len(sp.Fields))
			for i, f := range sp.Fields {
				names[i] = string(f)
			}
			return names, lr.Start, nil
		}
	}
}
