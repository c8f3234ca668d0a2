package stream

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// FileOptions configure a file source.
type FileOptions struct {
	// Follow: at the end of the file (of a directory's last part) wait
	// for more rather than end.
	Follow bool
	// Stdin is standard input (nil: os.Stdin).
	Stdin io.Reader
	Log   zerolog.Logger
	// Poll is the longest wait between two looks at a followed file or
	// directory that has nothing new (0: 500ms); the first look after
	// new rows comes after 5ms, each next one after twice as long.
	Poll time.Duration
}

// fileBuffer is the read buffer of a file source.
const fileBuffer = 1 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// OpenFile opens a file source at position p: standard input (path "-",
// kind stdin), a file (kind file) or a directory of part files (kind
// dir). A directory's parts are its regular files whose names do not
// start with "." or "_" (a writer's temporary files, _SUCCESS markers),
// read in name order; a part is complete once a part after it exists.
// A followed file may not exist yet: the source waits for it.
func OpenFile(ctx context.Context, path string, p *Position, opt FileOptions) (Source, error) {
	if opt.Poll <= 0 {
		opt.Poll = 500 * time.Millisecond
	}
	s := &fileSource{kind: p.Kind, path: path, opt: opt, line: p.Line, byte: p.Byte, crc: p.CRC}
	switch p.Kind {
	case KindStdin:
		in := opt.Stdin
		if in == nil {
			in = os.Stdin
		}
		s.name, s.r = path, bufio.NewReaderSize(in, fileBuffer)
		return s, s.skipStdin(p)
	case KindFile:
		s.name = path
		return s, s.open(ctx, path, p.Byte)
	case KindDir:
		s.dir, s.name = path, p.File
		if p.File == "" {
			return s, nil // the first part is opened by Next
		}
		return s, s.open(ctx, filepath.Join(path, p.File), p.Byte)
	}
	return nil, fmt.Errorf("a %s position is not one of a file source", p.Kind)
}

type fileSource struct {
	kind string
	path string // the file, "-", or the directory
	dir  string // kind dir: the directory
	name string // the file being read: the path, or a part's name
	opt  FileOptions
	f    *os.File // nil for standard input
	r    *bufio.Reader
	line int64
	byte int64
	crc  uint32
	// pending holds the start of a line whose end has not arrived yet.
	pending []byte
	rec     Record
	// wait is the next wait for a followed file that had nothing new.
	wait time.Duration
}

// skipStdin passes over the bytes of standard input a position covers,
// checking that they are the bytes it read (their CRC-32C).
func (s *fileSource) skipStdin(p *Position) error {
	s.byte, s.line, s.crc = 0, 0, 0
	for s.byte < p.Byte {
		b, err := s.r.ReadSlice('\n')
		if int64(len(b)) > p.Byte-s.byte {
			return fmt.Errorf("standard input: the checkpoint's position is at byte %d, which is inside a line of this input; feed the resumed run the same input from its start (rows before the position are skipped, not trained again)", p.Byte)
		}
		s.crc = crc32.Update(s.crc, castagnoli, b)
		s.byte += int64(len(b))
		if len(b) > 0 && b[len(b)-1] == '\n' {
			s.line++
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil && s.byte < p.Byte {
			return fmt.Errorf("standard input ended at byte %d, before the checkpoint's position at byte %d; feed the resumed run the same input from its start (rows before the position are skipped, not trained again)", s.byte, p.Byte)
		}
	}
	if s.crc != p.CRC {
		return fmt.Errorf("standard input's first %d bytes are not those the checkpoint's run read (CRC-32C %08x, not %08x); feed the resumed run the same input from its start (rows before the position are skipped, not trained again)", p.Byte, s.crc, p.CRC)
	}
	s.line = p.Line
	return nil
}

// open opens a file (waiting for it when followed) at byte off.
func (s *fileSource) open(ctx context.Context, path string, off int64) error {
	for {
		f, err := os.Open(path)
		if err == nil {
			st, err := f.Stat()
			if err == nil && st.Size() < off {
				err = fmt.Errorf("it has %d bytes, fewer than the %d the checkpoint's position covers: was it rewritten? a followed file may only grow", st.Size(), off)
			}
			if err == nil && off > 0 {
				_, err = f.Seek(off, io.SeekStart)
			}
			if err != nil {
				f.Close()
				return fmt.Errorf("%s: %w", path, err)
			}
			s.f, s.byte = f, off
			if s.r == nil {
				s.r = bufio.NewReaderSize(f, fileBuffer)
			} else {
				s.r.Reset(f)
			}
			return nil
		}
		if !os.IsNotExist(err) || !s.opt.Follow || s.kind == KindDir {
			return fmt.Errorf("cannot open data file: %w", err)
		}
		if s.wait == 0 {
			s.opt.Log.Info().Str("file", path).Msg("waiting for the followed file to exist")
		}
		if err := s.pause(ctx); err != nil {
			return err
		}
	}
}

// pause waits before the next look at a followed file with nothing new.
func (s *fileSource) pause(ctx context.Context) error {
	s.wait = min(max(2*s.wait, 5*time.Millisecond), s.opt.Poll)
	t := time.NewTimer(s.wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *fileSource) Next(ctx context.Context) (*Record, error) {
	for {
		if s.r == nil { // a directory before its first part
			ok, err := s.nextPart(ctx)
			if err != nil || !ok {
				return nil, err
			}
			continue
		}
		b, err := s.r.ReadSlice('\n')
		switch {
		case err == nil:
			if len(s.pending) > 0 {
				s.pending = append(s.pending, b...)
				b = s.pending
				s.pending = s.pending[:0]
			}
			s.wait = 0
			return s.emit(b), nil
		case err == bufio.ErrBufferFull:
			s.pending = append(s.pending, b...)
			if len(s.pending) > maxLine {
				return nil, fmt.Errorf("%s:%d: line is longer than %d MiB; is this a text data file?", s.name, s.line+1, maxLine>>20)
			}
			continue
		case err != io.EOF:
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		s.pending = append(s.pending, b...)
		switch s.kind {
		case KindStdin:
			if len(s.pending) > 0 { // a last line without its newline
				return s.emitPending(), nil
			}
			return nil, io.EOF
		case KindFile:
			if err := s.grown(ctx); err != nil {
				return nil, err
			}
		case KindDir:
			// A part is complete once a later one exists: its last line
			// may lack a newline. The last part is complete when the
			// directory is not followed.
			later, err := s.laterPart()
			if err != nil {
				return nil, err
			}
			if later == "" && s.opt.Follow {
				if err := s.grown(ctx); err != nil {
					return nil, err
				}
				continue
			}
			if later != "" {
				// Bytes written to the part before the later part appeared.
				if more, err := s.r.Peek(1); len(more) > 0 || err != io.EOF {
					continue
				}
			}
			if len(s.pending) > 0 {
				return s.emitPending(), nil
			}
			if later == "" {
				return nil, io.EOF
			}
			if err := s.openPart(ctx, later); err != nil {
				return nil, err
			}
		}
	}
}

// grown waits until a followed file has bytes after those read, checking
// that it was not cut shorter.
func (s *fileSource) grown(ctx context.Context) error {
	for {
		st, err := s.f.Stat()
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		read := s.byte + int64(len(s.pending))
		if st.Size() < read {
			return fmt.Errorf("%s was cut to %d bytes while it was followed at byte %d; a followed file may only grow (rotate files into a directory and follow the directory)", s.name, st.Size(), read)
		}
		if st.Size() > read {
			return nil
		}
		if s.kind == KindDir {
			if later, err := s.laterPart(); err != nil || later != "" {
				return err
			}
		}
		if err := s.pause(ctx); err != nil {
			return err
		}
	}
}

// emit makes line (its newline included) the next record.
func (s *fileSource) emit(line []byte) *Record {
	if s.kind == KindStdin {
		s.crc = crc32.Update(s.crc, castagnoli, line)
	}
	s.byte += int64(len(line))
	s.line++
	v := bytes.TrimSuffix(bytes.TrimSuffix(line, []byte{'\n'}), []byte{'\r'})
	s.rec = Record{Value: v, Off: s.line, File: s.name, End: s.byte, CRC: s.crc}
	return &s.rec
}

// emitPending makes the pending bytes, a last line without its newline,
// the next record.
func (s *fileSource) emitPending() *Record {
	r := s.emit(s.pending)
	s.pending = s.pending[:0]
	return r
}

// parts lists a directory's part files in name order.
func (s *fileSource) parts() ([]string, error) {
	es, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	var out []string
	for _, e := range es {
		n := e.Name()
		if strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || !e.Type().IsRegular() {
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// laterPart is the first part after the one being read ("" when none).
func (s *fileSource) laterPart() (string, error) {
	ps, err := s.parts()
	if err != nil {
		return "", err
	}
	for _, p := range ps {
		if p > s.name {
			return p, nil
		}
	}
	return "", nil
}

// nextPart opens a directory's first part, waiting for one when it is
// followed; false when there is none and it is not.
func (s *fileSource) nextPart(ctx context.Context) (bool, error) {
	for {
		later, err := s.laterPart()
		if err != nil {
			return false, err
		}
		if later != "" {
			return true, s.openPart(ctx, later)
		}
		if !s.opt.Follow {
			return false, io.EOF
		}
		if s.wait == 0 {
			s.opt.Log.Info().Str("dir", s.dir).Msg("waiting for a part file in the followed directory")
		}
		if err := s.pause(ctx); err != nil {
			return false, err
		}
	}
}

func (s *fileSource) openPart(ctx context.Context, name string) error {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	s.name, s.line, s.wait = name, 0, 0
	if err := s.open(ctx, filepath.Join(s.dir, name), 0); err != nil {
		return err
	}
	s.opt.Log.Info().Str("part", name).Str("dir", s.dir).Msg("reading the next part file")
	return nil
}

func (s *fileSource) Where(r *Record) string {
	switch s.kind {
	case KindStdin:
		return fmt.Sprintf("stdin:%d", r.Off)
	case KindDir:
		return fmt.Sprintf("%s:%d", filepath.Join(s.dir, r.File), r.Off)
	}
	return fmt.Sprintf("%s:%d", r.File, r.Off)
}

func (s *fileSource) Close() error {
	if s.f != nil {
		return s.f.Close()
	}
	return nil
}

// maxLine bounds the length of one line of a data file.
const maxLine = 1 << 26
