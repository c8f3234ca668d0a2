package data

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/tensor"
)

// LineParser parses rows handed over one line at a time (the rows of a
// served request) with a model's data spec: the row parser of its data
// files (fill, hash, transform), then the normalization statistics it is
// given, so a row is what training and `psgraph predict` made of the same
// line. A row holds the model's columns at their positions, with or
// without the label: a row of at least Fields() fields holds the label's
// columns (never read), one of exactly Fields()-LabelWidth() fields has
// them cut out where they stood. Errors name the row ("row 3: column 5:
// ..."). A LineParser is not safe for concurrent use: one per goroutine.
type LineParser struct {
	p     *rowParser
	spec  *dsl.Data // the model's, without its label
	rows  batchRows
	scale *Scaling
	label *dsl.Column // the model's label (nil: none)
	need  int         // fields of a row with the label
	// labelCols are the label's columns below need, in order: a row
	// without them has need-len(labelCols) fields.
	labelCols []int
	held      [][]byte // a label-less row's fields with the label's put back, empty
	row       int      // the row being parsed, for errors
}

// NewLineParser is the parser of rows of spec, normalized with norm
// (nil: none).
func NewLineParser(spec *dsl.Data, norm *Scaling) (*LineParser, error) {
	noLabel := *spec
	noLabel.Label = nil
	lp := &LineParser{p: newRowParser(&noLabel), spec: &noLabel, label: spec.Label}
	lp.p.where = func() string { return "row " + strconv.Itoa(lp.row) }
	lp.rows.init(&noLabel, lp.p)
	for _, c := range spec.Columns() {
		for _, col := range c.Cols {
			lp.need = max(lp.need, col+1)
		}
	}
	if c := spec.Label; c != nil {
		lp.labelCols = slices.Sorted(slices.Values(c.Cols))
	}
	if norm != nil && norm.Vocabs != nil {
		if err := lp.p.fitsVocabs(norm.Vocabs); err != nil {
			return nil, err
		}
		lp.p.setVocabs(norm.Vocabs)
	}
	if norm != nil && norm.Shift != nil {
		if err := norm.fits(lp.p.nf); err != nil {
			return nil, err
		}
		lp.scale = norm
	}
	return lp, nil
}

// Spec is the data spec of the values the parser writes: the model's
// without its label. program.FeederOf(Spec(), scope) lists the tensors
// Parse takes, in order.
func (lp *LineParser) Spec() *dsl.Data { return lp.spec }

// Fields is how many fields a row with the label holds: one past the
// model's last column.
func (lp *LineParser) Fields() int { return lp.need }

// LabelWidth is how many columns the label takes (0: the model has none).
func (lp *LineParser) LabelWidth() int {
	return len(lp.labelCols)
}

// Parse parses line, row `row` of a request, into row b of the tensors
// dst (one per variable of Spec(), in its Columns order; a nil tensor is
// not fed), normalized.
func (lp *LineParser) Parse(line []byte, row int, dst []*tensor.Tensor, b int) error {
	p := lp.p
	lp.row = row
	line = dsl.TrimField(line, p.delim)
	if len(line) == 0 {
		return p.errAt(row, "the row is empty; give one line of the data file, its fields separated by %s", p.delimName())
	}
	if err := p.split(line); err != nil {
		return p.quoteErr(row, err)
	}
	return lp.parseSplit(row, dst, b)
}

// Delim is the delimiter of the rows' fields.
func (lp *LineParser) Delim() byte { return lp.p.delim }

// ParseFields is Parse of a line of at least two fields already cut into
// them as Parse cuts it: at Delim(), each field trimmed of white space
// and unquoted as csvrow.Splitter does (the served rows that
// serve.SplitRows cut as the request was read). fields is read, not kept.
func (lp *LineParser) ParseFields(fields [][]byte, row int, dst []*tensor.Tensor, b int) error {
	lp.row = row
	lp.p.fields = fields
	return lp.parseSplit(row, dst, b)
}

// parseSplit parses the fields of row `row` in lp.p.fields into row b of
// dst: Parse after the split.
func (lp *LineParser) parseSplit(row int, dst []*tensor.Tensor, b int) error {
	p := lp.p
	n, lw := len(p.fields), lp.LabelWidth()
	switch {
	case n >= lp.need:
	case lw > 0 && n == lp.need-lw:
		// the label's columns were left out: put them back, empty
		lp.held = lp.held[:0]
		at := 0
		for _, f := range p.fields {
			for at < lw && lp.labelCols[at] == len(lp.held) {
				lp.held = append(lp.held, nil)
				at++
			}
			lp.held = append(lp.held, f)
		}
		for ; at < lw; at++ {
			lp.held = append(lp.held, nil)
		}
		p.fields = lp.held
	default:
		without := ""
		if lw > 0 {
			without = fmt.Sprintf(", or %d without the label %q (columns %v)", lp.need-lw, lp.label.Name, lp.labelCols)
		}
		return p.errAt(row, "column %d is missing: the row has %d fields separated by %s, and the model reads %d (columns 0 to %d)%s (data at %s)", n, n, p.delimName(), lp.need, lp.need-1, without, lp.spec.Pos)
	}
	out := lp.rows.at(dst, b)
	if err := p.parseFields(row, out); err != nil {
		return err
	}
	if lp.scale != nil {
		for i, fs := range p.feats {
			lp.scale.applyAt(fs.off, out.feat[i])
		}
	}
	return nil
}

// Features writes into dst what Parse makes of the values src of
// features spec i (in data order) of row `row`, given as numbers rather
// than a line: NaN is a missing value and takes the spec's fill, then the
// transform and the normalization apply.
func (lp *LineParser) Features(i, row int, src []float64, dst []float32) error {
	fs := lp.p.feats[i]
	c := fs.c
	lp.row = row
	if len(src) != c.Width() || len(dst) != c.Width() {
		return fmt.Errorf("features %q take %d values a row, got %d", c.Name, c.Width(), len(src))
	}
	for j, v := range src {
		switch {
		case math.IsNaN(v) && c.Fill == nil:
			return lp.p.errAt(row, "column %d of %q is NaN, a missing value, and %s has no fill (%s); send a number", c.Cols[j], c.Name, c.Key(), c.Pos)
		case math.IsNaN(v):
			v = *c.Fill
		case math.IsInf(v, 0):
			return lp.p.errAt(row, "column %d of %q is infinite; send a finite number", c.Cols[j], c.Name)
		}
		if c.Transform == "log" && v > 0 {
			v = math.Log1p(v)
		}
		dst[j] = float32(v)
	}
	if lp.scale != nil {
		lp.scale.applyAt(fs.off, dst)
	}
	return nil
}
