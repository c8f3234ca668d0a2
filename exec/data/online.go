package data

import (
	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/tensor"
)

// OnlineParser parses the rows of an online source (dsl.Online: a Kafka
// message, a line of standard input or of a followed file) one at a time,
// each straight into a row of batch tensors, with the row parser, column
// specs, hashing and normalization of a csv file. Its errors name where
// the row came from, as its where function says (called only for an
// error), instead of a file and line. Parsing a row allocates nothing.
// It is not safe for concurrent use.
type OnlineParser struct {
	p     *rowParser
	rows  batchRows
	scale *Scaling // nil: none
	stats *featureStats
}

// NewOnlineParser is the parser of spec's rows; where describes the row
// being parsed, for errors.
func NewOnlineParser(spec *dsl.Data, where func() string) *OnlineParser {
	p := newRowParser(spec)
	p.where = where
	o := &OnlineParser{p: p}
	o.rows.init(spec, p)
	return o
}

// Blank says whether line holds no row (blank lines are not rows).
func (o *OnlineParser) Blank(line []byte) bool { return len(dsl.TrimField(line, o.p.delim)) == 0 }

// Parse parses the row in line (not blank) into row b of the batch
// tensors dst, one per data variable as Batches.Fill takes them, and
// normalizes its features.
func (o *OnlineParser) Parse(line []byte, dst []*tensor.Tensor, b int) error {
	out := o.rows.at(dst, b)
	if err := o.p.parse(dsl.TrimField(line, o.p.delim), 0, out); err != nil {
		return err
	}
	if o.scale != nil {
		for i, fs := range o.p.feats {
			o.scale.applyAt(fs.off, out.feat[i])
		}
	}
	return nil
}

// Observe parses the row in line (not blank) and adds its features to
// the statistics of the rows observed, without writing it anywhere: a
// stream's first rows, for normalize_rows.
func (o *OnlineParser) Observe(line []byte) error {
	if err := o.p.parse(dsl.TrimField(line, o.p.delim), 0, &o.rows.scratch); err != nil {
		return err
	}
	if o.stats == nil {
		o.stats = newFeatureStats(o.p.nf)
	}
	o.stats.add(o.rows.row)
	return nil
}

// Observed is the normalization mode computes from the rows observed so
// far (nil: none observed, or no features to normalize).
func (o *OnlineParser) Observed(mode string) *Scaling {
	if o.stats == nil || o.stats.rows == 0 || o.p.nf == 0 || mode == "" || mode == "none" {
		return nil
	}
	return o.stats.scaling(mode)
}

// SetScaling makes Parse normalize with sc (nil: none); sc must cover the
// data's feature columns.
func (o *OnlineParser) SetScaling(sc *Scaling) error {
	if sc != nil && sc.Vocabs != nil {
		if err := o.p.fitsVocabs(sc.Vocabs); err != nil {
			return err
		}
		o.p.setVocabs(sc.Vocabs)
	}
	if sc != nil && sc.Shift == nil {
		sc = nil
	}
	if err := sc.fits(o.p.nf); err != nil {
		return err
	}
	o.scale = sc
	return nil
}

// Scaling is the normalization Parse applies (nil: none).
func (o *OnlineParser) Scaling() *Scaling { return o.scale }

// Features is the number of feature columns a row has.
func (o *OnlineParser) Features() int { return o.p.nf }

// Truncated lists the ids specs some of whose fields held more than
// max_len ids, among the rows parsed.
func (o *OnlineParser) Truncated() []Truncation { return truncations(o.p.spec, o.p.truncated, nil) }
