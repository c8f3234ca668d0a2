package data

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/internal/csvrow"
)

// rowSource reads the rows of a data file in file order, parsing each
// with the row parser: a delimited text file's records, a tfrecord file's
// examples, a parquet file's rows. Loaded sets, streamed files and counts
// all read through one, so every format gives the same rows every way.
type rowSource interface {
	// rewind goes back to the file's first row.
	rewind() error
	// row parses the next row into out; false at the file's end.
	row(out *rowOut) (bool, error)
	// skip passes over the next row without parsing it; false at the end.
	skip() (bool, error)
	// pos is the bytes of the file read so far (for progress).
	pos() int64
	close() error
}

// openSource opens spec's data file as a source of rows parsed by p,
// positioned at its first row.
func openSource(spec *dsl.Data, p *rowParser, buffer int) (rowSource, error) {
	var src rowSource
	var err error
	switch spec.Format {
	case dsl.FormatTFRecord:
		src, err = openTFRecord(spec, p, buffer)
	case dsl.FormatParquet:
		src, err = openParquet(spec, p)
	default:
		src, err = openCSV(spec, p, buffer)
	}
	if err != nil {
		return nil, err
	}
	if err := src.rewind(); err != nil {
		src.close()
		return nil, err
	}
	return src, nil
}

// csvSource is a delimited text file's rows: its records (RFC 4180), the
// header line and blank lines skipped.
type csvSource struct {
	spec *dsl.Data
	f    *os.File
	r    *csvrow.Reader
	p    *rowParser
}

func openCSV(spec *dsl.Data, p *rowParser, buffer int) (*csvSource, error) {
	f, err := os.Open(spec.CSV)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot open data file: %w", spec.CSV, err)
	}
	return &csvSource{spec: spec, f: f, r: csvrow.NewReader(bufio.NewReaderSize(f, buffer), p.delim), p: p}, nil
}

func (s *csvSource) close() error { return s.f.Close() }
func (s *csvSource) pos() int64   { return s.r.Pos }

// next is the next record that holds a row, trimmed; nil at the end.
func (s *csvSource) next() ([]byte, error) {
	for {
		rec, err := s.r.Next()
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return nil, s.err(err)
		}
		if line := csvrow.Trim(rec, s.p.delim); len(line) > 0 {
			return line, nil
		}
	}
}

// err places a reading error in the file.
func (s *csvSource) err(err error) error {
	var qe *csvrow.Error
	if errors.As(err, &qe) {
		return s.p.quoteErr(s.r.Start, qe)
	}
	return fmt.Errorf("%s:%d: %w", s.spec.CSV, s.r.Line+1, err)
}

func (s *csvSource) rewind() error {
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("%s: %w", s.spec.CSV, err)
	}
	s.r.Reset(s.f)
	if !s.spec.Header {
		return nil
	}
	line, err := s.next() // the header line names the columns; rows start after it
	switch {
	case err != nil:
		return err
	case line == nil:
		return fmt.Errorf("%s: the data file has no rows", s.spec.CSV)
	}
	return s.p.header(line, s.r.Start)
}

func (s *csvSource) row(out *rowOut) (bool, error) {
	line, err := s.next()
	if err != nil || line == nil {
		return false, err
	}
	return true, s.p.parse(line, s.r.Start, out)
}

func (s *csvSource) skip() (bool, error) {
	for {
		row, err := s.r.Skip()
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, s.err(err)
		}
		if row {
			return true, nil
		}
	}
}
