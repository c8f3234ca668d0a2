package data

import (
	"fmt"
	"os"
	"slices"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/progress"
	"github.com/psgraph/psgraph/exec/tensor"
)

// StreamBuffer is the read buffer of a FileStream: with the batch tensors
// and one row of scratch, all the memory a streamed data set takes.
const StreamBuffer = 1 << 20

// FileStream serves batches by the data stream rule straight from a data
// file (data.stream: true), reading it sequentially: the rows of one batch
// are parsed into the batch's tensors, the rows in between (another
// trainer's) are skipped by finding their newlines, and the reader goes
// back to the file's start when a batch runs past its end. It holds no
// rows, so its memory does not grow with the file.
//
// Rows are checked as they are parsed: a bad line is reported, as
// file:line, when a batch first reads it. With normalize, opening the
// stream reads the file once to compute the statistics, which checks every
// line up front. A FileStream is not safe for concurrent use.
type FileStream struct {
	spec  *dsl.Data
	src   rowSource
	p     *rowParser
	scale *Scaling // nil: no normalization
	cur   int64    // file row (counting non-blank lines from 0) read next
	rows  int64    // rows in the file; -1 until the first pass reaches its end
	batchRows
	// truncBase is the parser's truncation counts when the stream opened:
	// Truncated counts what the batches read after it.
	truncBase []int64
}

// OpenStream opens a model's data file as a stream. It reads the first
// row, to check the column ranges against it, and with normalize the whole
// file (the statistics of every feature column).
func OpenStream(spec *dsl.Data) (*FileStream, error) {
	return openStream(spec, StreamBuffer, nil, nil)
}

// OpenStreamProgress is OpenStream reporting the progress of the
// normalization pass to rep (nil: none).
func OpenStreamProgress(spec *dsl.Data, rep *progress.Reporter) (*FileStream, error) {
	return openStream(spec, StreamBuffer, nil, rep)
}

// OpenStreamScaled opens a data file as a stream normalized with given
// statistics (nil: none) instead of its own: held-out and prediction data
// use the training rows' statistics.
func OpenStreamScaled(spec *dsl.Data, norm *Scaling) (*FileStream, error) {
	if norm == nil {
		norm = &Scaling{} // none; do not compute the file's own
	}
	return openStream(spec, StreamBuffer, norm, nil)
}

// Scaling is the normalization the stream applies and the vocabularies
// it maps values by (nil: neither).
func (s *FileStream) Scaling() *Scaling {
	if s.scale == nil || s.scale.Shift == nil && s.scale.Vocabs == nil {
		return nil
	}
	return s.scale
}

func openStream(spec *dsl.Data, buffer int, norm *Scaling, rep *progress.Reporter) (*FileStream, error) {
	if spec.CSV == "" {
		return nil, fmt.Errorf("data (%s): stream needs a data file", spec.Pos)
	}
	s := &FileStream{spec: spec, p: newRowParser(spec), rows: -1}
	var err error
	if norm != nil && norm.Vocabs != nil {
		if err := s.p.fitsVocabs(norm.Vocabs); err != nil {
			return nil, err
		}
		s.p.setVocabs(norm.Vocabs)
	}
	if s.src, err = openSource(spec, s.p, buffer); err != nil {
		return nil, err
	}
	s.batchRows.init(spec, s.p)
	fail := func(err error) (*FileStream, error) {
		s.src.close()
		return nil, err
	}
	if norm != nil && norm.Shift != nil {
		if err := norm.fits(s.p.nf); err != nil {
			return fail(err)
		}
	}
	normalize := norm == nil && spec.Normalize != "" && spec.Normalize != "none" && s.p.nf > 0
	if normalize || s.p.counting { // one pass: the statistics and the vocabularies
		var st *featureStats
		what := "reading the data file for the vocabularies"
		if normalize {
			st, what = newFeatureStats(s.p.nf), "reading the data file for the normalization statistics"
		}
		ph := s.startPass(rep, what)
		if _, err := s.pass(ph, func() {
			if st != nil {
				st.add(s.row)
			}
		}); err != nil {
			return fail(err)
		}
		sc := &Scaling{Mode: spec.Normalize}
		if st != nil {
			sc = st.scaling(spec.Normalize)
		}
		if s.p.counting {
			var saved Vocabs
			if norm != nil {
				saved = norm.Vocabs
			}
			sc.Vocabs = s.p.buildVocabs(saved)
		}
		if norm != nil && norm.Shift != nil {
			sc.Mode, sc.Shift, sc.Scale = norm.Mode, norm.Shift, norm.Scale
		}
		norm = sc
	} else if norm == nil {
		norm = &Scaling{Mode: spec.Normalize}
	}
	s.scale = norm
	if err := s.rewind(); err != nil {
		return fail(err)
	}
	if err := s.readRow(&s.scratch); err != nil { // the width of the rows
		return fail(err)
	}
	if err := s.rewind(); err != nil {
		return fail(err)
	}
	s.truncBase = slices.Clone(s.p.truncated)
	return s, nil
}

// Truncated lists the ids specs some of whose fields held more than
// max_len ids, among the rows the stream's batches read since it opened
// (a row read in several epochs counts each time).
func (s *FileStream) Truncated() []Truncation {
	return truncations(s.spec, s.p.truncated, s.truncBase)
}

// Close closes the file.
func (s *FileStream) Close() error { return s.src.close() }

// Rows is the number of rows in the file, or -1 while the stream has not
// yet reached the file's end.
func (s *FileStream) Rows() int64 { return s.rows }

// pass reads the file from its start to its end, one row at a time into
// the scratch row, calling fn after each; it returns the number of rows.
// It counts the bytes read to ph (nil: none) and ends it.
func (s *FileStream) pass(ph *progress.Phase, fn func()) (int64, error) {
	defer ph.Done()
	if err := s.rewind(); err != nil {
		return 0, err
	}
	reported := s.src.pos()
	for {
		ok, err := s.nextRow(&s.scratch)
		if err != nil {
			return 0, err
		}
		if !ok {
			ph.Add(s.src.pos() - reported)
			return s.cur, nil
		}
		fn()
		if s.cur%progressRows == 0 {
			ph.Add(s.src.pos() - reported)
			reported = s.src.pos()
		}
	}
}

// progressRows is how many rows a pass reads between two progress counts.
const progressRows = 4096

// startPass starts the progress phase of a pass over the file, counted in
// its bytes.
func (s *FileStream) startPass(rep *progress.Reporter, what string) *progress.Phase {
	if rep == nil {
		return nil
	}
	size := int64(-1)
	if fi, err := os.Stat(s.spec.CSV); err == nil {
		size = fi.Size()
	}
	return rep.Start(what+" "+s.spec.CSV, "bytes", size)
}

func (s *FileStream) rewind() error {
	s.cur = 0
	return s.src.rewind()
}

// nextRow parses the next row of the file; false at the file's end, which
// also settles the row count.
func (s *FileStream) nextRow(out *rowOut) (bool, error) {
	ok, err := s.src.row(out)
	switch {
	case err != nil:
		return false, err
	case ok:
		s.cur++
		return true, nil
	case s.rows < 0 && s.cur == 0:
		return false, fmt.Errorf("%s: the data file has no rows", s.spec.CSV)
	case s.rows < 0:
		s.rows = s.cur
	case s.cur != s.rows:
		return false, s.changed()
	}
	return false, nil
}

func (s *FileStream) changed() error {
	return fmt.Errorf("%s: the file changed while it was read (it had %d rows, now %d); do not write a data file during training", s.spec.CSV, s.rows, s.cur)
}

// readRow parses the next row of the stream: the file's next row, or its
// first when the file is at its end.
func (s *FileStream) readRow(out *rowOut) error {
	if s.rows >= 0 && s.cur == s.rows {
		if err := s.rewind(); err != nil {
			return err
		}
	}
	ok, err := s.nextRow(out)
	if err == nil && !ok {
		if err = s.rewind(); err == nil {
			if ok, err = s.nextRow(out); err == nil && !ok {
				err = s.changed()
			}
		}
	}
	return err
}

// skipRows passes over n rows of the file without parsing them; false if
// the file ended first (which settles the row count).
func (s *FileStream) skipRows(n int64) (bool, error) {
	for ; n > 0; n-- {
		row, err := s.src.skip()
		if err != nil {
			return false, err
		}
		if !row {
			if s.rows < 0 {
				s.rows = s.cur
			} else if s.cur != s.rows {
				return false, s.changed()
			}
			return false, nil
		}
		s.cur++
	}
	return true, nil
}

// seek places the reader at stream position pos: file row pos mod rows.
func (s *FileStream) seek(pos int64) error {
	if s.rows < 0 { // still in the first epoch: position = file row
		if pos < s.cur {
			if err := s.rewind(); err != nil {
				return err
			}
		}
		ok, err := s.skipRows(pos - s.cur)
		if err != nil || ok {
			return err
		}
		if s.rows == 0 {
			return fmt.Errorf("%s: the data file has no rows", s.spec.CSV)
		}
	}
	r := pos % s.rows
	if r < s.cur {
		if err := s.rewind(); err != nil {
			return err
		}
	}
	ok, err := s.skipRows(r - s.cur)
	if err == nil && !ok {
		err = s.changed()
	}
	return err
}

// Fill writes stream rows [start, start+batch) into the data tensors dst
// (see Batches). Consecutive calls with increasing starts read the file
// forward only.
func (s *FileStream) Fill(start int64, dst []*tensor.Tensor) error {
	batch, err := batchOf(s.layout, dst)
	if err != nil {
		return err
	}
	if err := s.seek(start); err != nil {
		return err
	}
	for b := 0; b < batch; b++ {
		out := s.at(dst, b)
		if err := s.readRow(out); err != nil {
			return err
		}
		s.normalize(out)
	}
	return nil
}

// batchRows is where a parser writes the rows of a batch: a batch row of
// the tensors being filled, or one row of scratch (for a pass over a
// file, and for the variables not fed).
type batchRows struct {
	label int32
	row   []float32 // one row's values, for a pass and for variables not fed
	ids   []int32
	keys  []int64
	tgt   []float32 // float label (dtype: float32) scratch
	// scratch points at row, label, tgt, ids and keys; out at a batch row of
	// the tensors being filled (scratch where a tensor is nil).
	scratch, out rowOut
	// layout places the variables' values in the batch tensors.
	layout []slot
}

func (s *batchRows) init(spec *dsl.Data, p *rowParser) {
	s.layout = layoutOf(spec)
	s.row, s.ids, s.keys, s.tgt = make([]float32, p.nf), make([]int32, p.ni), make([]int64, p.nk), make([]float32, p.nt)
	p.rowOut(&s.scratch, s.row, &s.label, s.tgt, s.ids, s.keys)
	p.rowOut(&s.out, s.row, &s.label, s.tgt, s.ids, s.keys)
}

// at points s.out at row b of the tensors dst, at the scratch row where a
// tensor is nil, and returns it: the row is parsed in place.
func (s *batchRows) at(dst []*tensor.Tensor, b int) *rowOut {
	o := &s.out
	for i, t := range dst {
		sl := s.layout[i]
		switch {
		case t == nil:
			switch sl.kind {
			case slotFeatures:
				o.feat[sl.spec] = s.scratch.feat[sl.spec]
			case slotLabel:
				o.label = s.scratch.label
			case slotTargets:
				o.tgt = s.scratch.tgt
			case slotIDs:
				o.ids[sl.spec] = s.scratch.ids[sl.spec]
			case slotKeys:
				o.keys[sl.spec] = s.scratch.keys[sl.spec]
			}
		case sl.kind == slotFeatures:
			o.feat[sl.spec] = t.F[b*sl.width : (b+1)*sl.width]
		case sl.kind == slotLabel:
			o.label = &t.I[b]
		case sl.kind == slotTargets:
			o.tgt = t.F[b*sl.width : (b+1)*sl.width]
		case sl.kind == slotIDs:
			o.ids[sl.spec] = t.I[b*sl.width : (b+1)*sl.width]
		case sl.kind == slotKeys:
			o.keys[sl.spec] = t.L[b*sl.width : (b+1)*sl.width]
		}
	}
	return o
}

// normalize applies the stream's scaling to the features of a row just
// parsed, spec by spec.
func (s *FileStream) normalize(out *rowOut) {
	if s.scale == nil || s.scale.Shift == nil {
		return
	}
	for i, fs := range s.p.feats {
		s.scale.applyAt(fs.off, out.feat[i])
	}
}

// Epoch reads the file once in order, in chunks of the tensors' batch
// rows: fn(n) is called after each chunk is written into the tensors dst
// (as Fill's), with n = batch except for a shorter last chunk. Evaluation
// uses it.
func (s *FileStream) Epoch(dst []*tensor.Tensor, fn func(n int) error) error {
	batch, err := batchOf(s.layout, dst)
	if err != nil {
		return err
	}
	if err := s.rewind(); err != nil {
		return err
	}
	for {
		n := 0
		for ; n < batch; n++ {
			out := s.at(dst, n)
			ok, err := s.nextRow(out)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			s.normalize(out)
		}
		if n > 0 {
			if err := fn(n); err != nil {
				return err
			}
		}
		if n < batch {
			return nil
		}
	}
}

// Count reads a model's data file once, checking every row, and returns
// the number of rows and the multi-valued fields cut to their max_len:
// what `psgraph check` reports for a streamed file, without loading it.
func Count(spec *dsl.Data) (int64, []Truncation, error) {
	s, err := openStream(spec, StreamBuffer, &Scaling{}, nil) // no statistics: one pass
	if err != nil {
		return 0, nil, err
	}
	defer s.Close()
	n, err := s.pass(nil, func() {})
	if err != nil {
		return 0, nil, err
	}
	return n, s.Truncated(), nil
}
