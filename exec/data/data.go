// Package data reads a model's data set (a delimited text file or a
// synthetic task) and serves batches by the data stream rule: the stream
// is the endless concatenation of epochs (file order, or one permutation
// per epoch drawn from the seed), and a batch is a contiguous range of
// stream rows. A file is loaded into memory (Load, Stream) or, with
// data.stream, read from disk as batches are asked for (FileStream); one
// row parser serves both, so they give the same rows.
package data

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/progress"
	"github.com/psgraph/psgraph/exec/tensor"
)

// Set is a data set held in memory, one row per example. A row's
// features are those of every features spec side by side, in spec order,
// and so are its int32 ids (ids specs without key) and its int64 keys
// (ids specs with key).
type Set struct {
	Rows     int
	Features []float32 // Rows x NF, normalized
	NF       int
	Labels   []int32   // class ids (a label without dtype: float32)
	Targets  []float32 // Rows x NT: a float label (dtype: float32), never normalized
	NT       int
	IDs      []int32 // Rows x NI
	NI       int
	Keys     []int64 // Rows x NK
	NK       int
	spec     *dsl.Data
	layout   []slot
	// vocabs are the vocabularies the rows were mapped by (nil: none).
	vocabs Vocabs
	// truncated: per ids spec, the fields of the file that held more than
	// max_len ids (counted when the file was read).
	truncated []int64
}

// Truncation is what a multi-valued ids column lost to its max_len.
type Truncation struct {
	Spec *dsl.Column
	// Fields is the number of fields that held more than max_len ids; each
	// kept its first max_len.
	Fields int64
}

// Truncated lists the ids specs some of whose fields held more than
// max_len ids, over the file the set was read from (all of it, the rows a
// data.eval fraction holds out included).
func (s *Set) Truncated() []Truncation { return truncations(s.spec, s.truncated, nil) }

// DescribeTruncation says what a multi-valued column lost, in a line for
// the log or psgraph check.
func DescribeTruncation(t Truncation) string {
	c := t.Spec
	return fmt.Sprintf("%s %q (%s): %d fields held more than max_len %d ids; each kept its first %d (raise max_len to keep more)", c.Key(), c.Name, c.Pos, t.Fields, c.MaxLen, c.MaxLen)
}

func truncations(spec *dsl.Data, counts, base []int64) []Truncation {
	var out []Truncation
	for j, n := range counts {
		if base != nil {
			n -= base[j]
		}
		if n > 0 {
			out = append(out, Truncation{Spec: spec.IDs[j], Fields: n})
		}
	}
	return out
}

// slot says where a data variable's values are in a row: a Batches reader
// is given one tensor per variable, in the order of dsl.Data.Columns.
type slot struct {
	kind       slotKind
	off, width int // in the row's features or ids
	spec       int // the spec's index among the features or ids specs
}

type slotKind uint8

const (
	slotFeatures slotKind = iota
	slotLabel             // int32 class ids [batch]
	slotTargets           // float32 targets [batch, width]
	slotIDs               // int32 ids [batch, width]
	slotKeys              // int64 keys [batch, width]
)

// layoutOf is the slot of each of spec's data variables, in the order of
// spec.Columns().
func layoutOf(spec *dsl.Data) []slot {
	var out []slot
	off := 0
	for i, c := range spec.Features {
		out = append(out, slot{kind: slotFeatures, off: off, width: c.Width(), spec: i})
		off += c.Width()
	}
	if c := spec.Label; c != nil && c.Float {
		out = append(out, slot{kind: slotTargets, width: len(c.Cols)})
	} else if c != nil {
		out = append(out, slot{kind: slotLabel, width: 1})
	}
	off, koff := 0, 0
	for i, c := range spec.IDs {
		if c.KeyType != "" {
			out = append(out, slot{kind: slotKeys, off: koff, width: c.Width(), spec: i})
			koff += c.Width()
			continue
		}
		out = append(out, slot{kind: slotIDs, off: off, width: c.Width(), spec: i})
		off += c.Width()
	}
	return out
}

// putRow writes one row (its features, label or targets, ids and keys)
// into row b of the batch tensors dst, one per data variable in layout
// order; a nil tensor is not fed.
func putRow(layout []slot, dst []*tensor.Tensor, b int, feat []float32, label int32, tgt []float32, ids []int32, keys []int64) {
	for i, t := range dst {
		if t == nil {
			continue
		}
		switch sl := layout[i]; sl.kind {
		case slotFeatures:
			copy(t.F[b*sl.width:(b+1)*sl.width], feat[sl.off:sl.off+sl.width])
		case slotLabel:
			t.I[b] = label
		case slotTargets:
			copy(t.F[b*sl.width:(b+1)*sl.width], tgt)
		case slotIDs:
			copy(t.I[b*sl.width:(b+1)*sl.width], ids[sl.off:sl.off+sl.width])
		case slotKeys:
			copy(t.L[b*sl.width:(b+1)*sl.width], keys[sl.off:sl.off+sl.width])
		}
	}
}

// batchOf is the batch of the tensors dst (their first dimension), after
// checking that there is one per data variable.
func batchOf(layout []slot, dst []*tensor.Tensor) (int, error) {
	if len(dst) != len(layout) {
		return 0, fmt.Errorf("a batch of the data takes %d tensors, one per data variable (features, label, ids in data order), got %d", len(layout), len(dst))
	}
	for _, t := range dst {
		if t != nil {
			return t.Shape[0], nil
		}
	}
	return 0, nil
}

// raw reads a model's data source (its csv, or generated rows) with the
// features transformed but not normalized.
func raw(spec *dsl.Data, rep *progress.Reporter, vocabs Vocabs) (*Set, error) {
	var s *Set
	var err error
	if spec.Synthetic != nil {
		s = synthetic(spec)
		if len(spec.Features) > 0 && spec.Features[0].Transform == "log" {
			for i, v := range s.Features {
				if v > 0 {
					s.Features[i] = float32(math.Log1p(float64(v)))
				}
			}
		}
	} else {
		s, err = readCSV(spec, rep, vocabs)
		if err != nil {
			return nil, err
		}
	}
	s.spec, s.layout = spec, layoutOf(spec)
	return s, nil
}

func readCSV(spec *dsl.Data, rep *progress.Reporter, vocabs Vocabs) (*Set, error) {
	p := newRowParser(spec)
	if vocabs != nil {
		if err := p.fitsVocabs(vocabs); err != nil {
			return nil, err
		}
		p.setVocabs(vocabs)
	}
	src, err := openSource(spec, p, 1<<20)
	if err != nil {
		return nil, err
	}
	defer src.close()
	if p.counting { // a first pass for the vocabularies built from the data
		if err := countVocabs(spec, p, src, vocabs); err != nil {
			return nil, err
		}
	}
	var ph *progress.Phase
	if rep != nil {
		size := int64(-1)
		if fi, err := os.Stat(spec.CSV); err == nil {
			size = fi.Size()
		}
		ph = rep.Start("reading "+spec.CSV, "bytes", size)
	}
	defer ph.Done()
	var reported int64
	s := &Set{NF: p.nf, NI: p.ni, NK: p.nk, NT: p.nt, vocabs: p.vocabsNow}
	var label int32
	var out rowOut
	for {
		s.Features = slices.Grow(s.Features, p.nf)[:len(s.Features)+p.nf]
		s.IDs = slices.Grow(s.IDs, p.ni)[:len(s.IDs)+p.ni]
		s.Keys = slices.Grow(s.Keys, p.nk)[:len(s.Keys)+p.nk]
		s.Targets = slices.Grow(s.Targets, p.nt)[:len(s.Targets)+p.nt]
		p.rowOut(&out, s.Features[len(s.Features)-p.nf:], &label, s.Targets[len(s.Targets)-p.nt:], s.IDs[len(s.IDs)-p.ni:], s.Keys[len(s.Keys)-p.nk:])
		ok, err := src.row(&out)
		if err != nil {
			return nil, err
		}
		if !ok {
			s.Features, s.IDs = s.Features[:len(s.Features)-p.nf], s.IDs[:len(s.IDs)-p.ni]
			s.Keys, s.Targets = s.Keys[:len(s.Keys)-p.nk], s.Targets[:len(s.Targets)-p.nt]
			break
		}
		if spec.Label != nil && p.nt == 0 {
			s.Labels = append(s.Labels, label)
		}
		s.Rows++
		if s.Rows%progressRows == 0 {
			ph.Add(src.pos() - reported)
			reported = src.pos()
		}
	}
	ph.Add(src.pos() - reported)
	if s.Rows == 0 {
		return nil, fmt.Errorf("%s: the data file has no rows", spec.CSV)
	}
	s.truncated = p.truncated
	return s, nil
}

// countVocabs reads the rows of src once to build the vocabularies the
// data builds (their values counted over the training rows: a held-out
// fraction's rows are not counted), then rewinds it.
func countVocabs(spec *dsl.Data, p *rowParser, src rowSource, saved Vocabs) error {
	var held []bool
	if e := spec.Eval; e != nil && e.Fraction > 0 {
		n, err := allRows(spec)
		if err != nil {
			return err
		}
		if held, err = heldOutOf(spec, int(n), nil); err != nil {
			return err
		}
	}
	var b batchRows
	b.init(spec, p)
	trunc := slices.Clone(p.truncated)
	for r := 0; ; r++ {
		if r < len(held) && held[r] {
			if _, err := src.skip(); err != nil {
				return err
			}
			continue
		}
		ok, err := src.row(&b.scratch)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
	}
	copy(p.truncated, trunc) // the parse that follows counts them
	p.vocabsNow = p.buildVocabs(saved)
	return src.rewind()
}

// Rows is the number of rows training reads, without parsing them: the
// synthetic rows, or the non-blank lines of the file less its header,
// less the rows data.eval: {fraction} holds out (as LoadSplit does).
// train.epochs turns into steps with it; the loader checks the rows.
func Rows(spec *dsl.Data) (int64, error) {
	n, err := allRows(spec)
	if err != nil || spec.Eval == nil || spec.Eval.Fraction == 0 || n < 2 {
		return n, err
	}
	return n - int64(heldCount(int(n), spec.Eval.Fraction)), nil
}

func allRows(spec *dsl.Data) (int64, error) {
	if spec.Synthetic != nil {
		return int64(spec.Synthetic.Rows), nil
	}
	p := newRowParser(spec)
	src, err := openSource(spec, p, 1<<20)
	if err != nil {
		return 0, err
	}
	defer src.close()
	var n int64
	for {
		row, err := src.skip()
		if err != nil {
			return 0, err
		}
		if !row {
			break
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("%s: the data file has no rows", spec.CSV)
	}
	return n, nil
}

// synthetic builds a learnable classification task: one random centre per
// class, rows drawn around their class centre with unit noise.
func synthetic(spec *dsl.Data) *Set {
	sy := spec.Synthetic
	r := rand.New(rand.NewPCG(sy.Seed, 0x5eed))
	centres := make([]float64, sy.Classes*sy.Features)
	for i := range centres {
		centres[i] = 2 * r.NormFloat64()
	}
	s := &Set{Rows: sy.Rows, NF: sy.Features, Features: make([]float32, sy.Rows*sy.Features), Labels: make([]int32, sy.Rows)}
	for i := 0; i < sy.Rows; i++ {
		c := r.IntN(sy.Classes)
		s.Labels[i] = int32(c)
		for j := 0; j < sy.Features; j++ {
			s.Features[i*sy.Features+j] = float32(centres[c*sy.Features+j] + r.NormFloat64())
		}
	}
	if spec.Features == nil {
		s.Features, s.NF = nil, 0
	}
	if c := spec.Label; c != nil && c.Float { // the class as a float target
		s.NT, s.Targets = 1, make([]float32, sy.Rows)
		for i, l := range s.Labels {
			s.Targets[i] = float32(l)
		}
		s.Labels = nil
	}
	return s
}

// stats computes the normalization of a set's features: nil for none.
func stats(s *Set, mode string) *Scaling {
	if s.NF == 0 || mode == "" || mode == "none" {
		return nil
	}
	st := newFeatureStats(s.NF)
	for i := 0; i < s.Rows; i++ {
		st.add(s.Features[i*s.NF : (i+1)*s.NF])
	}
	return st.scaling(mode)
}

// normalize applies sc (nil: none) to every row of s.
func normalize(s *Set, sc *Scaling) {
	if sc == nil || sc.Shift == nil || s.NF == 0 {
		return
	}
	for i := 0; i < s.Rows; i++ {
		sc.Apply(s.Features[i*s.NF : (i+1)*s.NF])
	}
}

// featureStats accumulates what normalization needs, per feature column,
// in row order: an in-memory set and a streamed file's first pass add the
// same values in the same order and so scale identically.
type featureStats struct {
	rows            int64
	sum, sq, lo, hi []float64
}

func newFeatureStats(nf int) *featureStats {
	st := &featureStats{sum: make([]float64, nf), sq: make([]float64, nf), lo: make([]float64, nf), hi: make([]float64, nf)}
	for j := range st.lo {
		st.lo[j], st.hi[j] = math.Inf(1), math.Inf(-1)
	}
	return st
}

func (st *featureStats) add(row []float32) {
	st.rows++
	for j, x := range row {
		v := float64(x)
		st.sum[j] += v
		st.sq[j] += v * v
		st.lo[j], st.hi[j] = math.Min(st.lo[j], v), math.Max(st.hi[j], v)
	}
}

// Scaling is the normalization of the feature columns: each column v maps
// to (v - Shift) / Scale, with the statistics of the training rows.
type Scaling struct {
	Mode         string // standard or minmax
	Shift, Scale []float64
	// Vocabs are the vocabularies the training rows were mapped by (nil:
	// none): they travel with the statistics, to be saved with the model.
	Vocabs Vocabs
}

// scaling gives standard: (v - mean) / std, minmax: (v - min) / (max -
// min); a std or range of 0 counts as 1.
func (st *featureStats) scaling(mode string) *Scaling {
	nf := len(st.sum)
	sc := &Scaling{Mode: mode, Shift: make([]float64, nf), Scale: make([]float64, nf)}
	n := float64(st.rows)
	for j := 0; j < nf; j++ {
		var a, b float64
		switch mode {
		case "standard":
			a = st.sum[j] / n
			b = math.Sqrt(math.Max(st.sq[j]/n-a*a, 0))
		case "minmax":
			a, b = st.lo[j], st.hi[j]-st.lo[j]
		}
		if b < 1e-12 {
			b = 1
		}
		sc.Shift[j], sc.Scale[j] = a, b
	}
	return sc
}

// Apply normalizes one row of features in place.
func (sc *Scaling) Apply(row []float32) { sc.applyAt(0, row) }

// applyAt normalizes the values of feature columns off, off+1, ... of a
// row in place: one features spec's.
func (sc *Scaling) applyAt(off int, vals []float32) {
	shift, scale := sc.Shift[off:off+len(vals)], sc.Scale[off:off+len(vals)]
	for j := range vals {
		vals[j] = float32((float64(vals[j]) - shift[j]) / scale[j])
	}
}

// Batches serves batches by the data stream rule: Fill writes stream rows
// [start, start+batch) into the data tensors dst, one per data variable in
// the order of dsl.Data.Columns (features specs, label, ids specs), batch
// being the tensors' first dimension; a nil tensor is not fed. A Stream
// serves them from memory, a FileStream from disk.
type Batches interface {
	Fill(start int64, dst []*tensor.Tensor) error
}

// Stream serves batches by the data stream rule. It is not safe for
// concurrent use; each node has its own.
type Stream struct {
	set   *Set
	perm  []int
	epoch int64
}

// NewStream starts a stream over s.
func NewStream(s *Set) *Stream {
	st := &Stream{set: s, epoch: -1}
	if s.spec != nil && s.spec.Shuffle {
		st.perm = make([]int, s.Rows)
	}
	return st
}

// row maps a stream position to a data set row.
func (st *Stream) row(pos int64) int {
	n := int64(st.set.Rows)
	e, i := pos/n, int(pos%n)
	if st.perm == nil {
		return i
	}
	if e != st.epoch {
		st.epoch = e
		r := rand.New(rand.NewPCG(st.set.spec.Seed, uint64(e)))
		for k := range st.perm {
			st.perm[k] = k
		}
		r.Shuffle(len(st.perm), func(a, b int) { st.perm[a], st.perm[b] = st.perm[b], st.perm[a] })
	}
	return st.perm[i]
}

// Fill writes stream rows [start, start+batch) into the data tensors dst
// (see Batches). It fails only when dst does not match the data variables.
func (st *Stream) Fill(start int64, dst []*tensor.Tensor) error {
	s := st.set
	batch, err := batchOf(s.layout, dst)
	if err != nil {
		return err
	}
	for b := 0; b < batch; b++ {
		r := st.row(start + int64(b))
		var label int32
		if s.Labels != nil {
			label = s.Labels[r]
		}
		putRow(s.layout, dst, b, s.Features[r*s.NF:(r+1)*s.NF], label, s.Targets[r*s.NT:(r+1)*s.NT], s.IDs[r*s.NI:(r+1)*s.NI], s.Keys[r*s.NK:(r+1)*s.NK])
	}
	return nil
}

// NewOrderedStream is a stream in file order, whatever the shuffle setting:
// evaluation reads the data set once, row by row.
func NewOrderedStream(s *Set) *Stream { return &Stream{set: s, epoch: -1} }
