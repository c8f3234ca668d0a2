package data

import (
	"bytes"
	"fmt"
	"math"
	"strconv"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/internal/csvrow"
)

// maxLine bounds the length of one line of a data file.
const maxLine = 1 << 26

// rowParser turns a line of a data file into one row's values: the
// features of every features spec side by side (nf values), the label, the
// int32 ids of every ids spec without key side by side (ni values), and
// the int64 keys of every spec with key side by side (nk values). It
// reuses its field slice: parsing a row allocates nothing.
type rowParser struct {
	spec      *dsl.Data
	file      string
	delim     byte
	need      int // columns the model reads
	width     int // fields of every line: those of the first row; -1 before it
	widthLine int // the first row's line
	sp        csvrow.Splitter
	// fields are the row's fields by file column: a line's, split, or
	// those a tfrecord or parquet reader put there (nil where the model
	// reads nothing); lists, for those readers, a column's list of values
	// (nil: one value, in fields).
	fields [][]byte
	lists  [][][]byte
	// ints are, for a tfrecord or parquet reader, the columns' one
	// values it gave as integers, where isInt says (rather than as text
	// in fields): the values their text would parse to, without its
	// formatting and parsing. Only columns read by features specs alone
	// are given so (typedCols). hashed are the columns whose one value it
	// gave as its hash (hashedCols).
	ints   []int64
	isInt  []bool
	hashed []hashedValue
	// labelText holds the text of a typed label that is read as text
	// (labelField)
	labelText []byte
	nf, ni    int
	nk        int // int64 keys (ids specs with key)
	nt        int // float label (target) columns; 0 for class ids
	feats     []featSpec
	ids       []idSpec
	// truncated counts, per ids spec, the fields that held more than
	// max_len ids (a multi-valued column); the first max_len were kept.
	truncated []int64
	// where, for the rows of an online source (OnlineParser), says where
	// the row being parsed came from ("kafka topic T partition 1 offset
	// 42", "FILE:LINE"); errors name it instead of file:line. widthWhere is
	// where the first row came from.
	where      func() string
	widthWhere string
	// label maps a label's field to its value (positive, threshold,
	// vocab); nil: the field is the value.
	labelVocab *vocabIndex
	// counting: the rows are read to build vocabularies (their ids are
	// not known yet, and written as 0).
	counting bool
	// vocabsNow are the vocabularies the parser maps by (saved, files'
	// and built ones), once it is not counting.
	vocabsNow Vocabs
}

// hashedValue is a column's one value given as its hash, h (hashKey of
// its bytes from the column's seed), where ok, for a column a reader may
// give so (hashedCols).
type hashedValue struct {
	ok bool
	h  uint64
}

// hashedCols says, by column, which columns a reader may give hashed, and
// the seed their bytes are hashed from: those read by one single-valued
// ids spec that hashes them (hash_buckets, key: hash64), and by nothing
// else.
func (p *rowParser) hashedCols(n int) (ok []bool, seed []uint64) {
	ok, seed = make([]bool, n), make([]uint64, n)
	uses := make([]int, n)
	for _, c := range p.spec.Columns() {
		for _, col := range c.Cols {
			uses[col]++
		}
	}
	for _, s := range p.ids {
		if !s.kind.hashed() || s.c.MaxLen > 0 {
			continue
		}
		for k, col := range s.c.Cols {
			ok[col], seed[col] = uses[col] == 1, s.seeds[k]
		}
	}
	return ok, seed
}

// typedCols says, by column, which columns a reader may give as integers:
// those read by features specs, and by the label where it is not mapped
// by positive or a vocabulary (its text, not its number), and by nothing
// else.
func typedCols(spec *dsl.Data, n int) []bool {
	k := make([]bool, n)
	for _, c := range spec.Features {
		for _, col := range c.Cols {
			k[col] = true
		}
	}
	if c := spec.Label; c != nil && c.Positive == nil && c.Vocab == nil {
		for _, col := range c.Cols {
			k[col] = true
		}
	}
	other := append([]*dsl.Column{}, spec.IDs...)
	if c := spec.Label; c != nil && (c.Positive != nil || c.Vocab != nil) {
		other = append(other, c)
	}
	for _, c := range other {
		for _, col := range c.Cols {
			k[col] = false
		}
	}
	return k
}

// featSpec is a features spec: its columns go to the row's features from off.
type featSpec struct {
	c   *dsl.Column
	off int
}

// rowOut is where the parser writes one row's values: each features spec's
// into feat[i], each ids spec's into ids[j] (int32 ids) or keys[j] (int64
// keys; in spec order, the other one nil), and the label (class id) or
// float targets. Streamed batches point them at the batch tensors' rows,
// so a row is parsed in place.
type rowOut struct {
	feat  [][]float32
	label *int32
	tgt   []float32
	ids   [][]int32
	keys  [][]int64
}

// rowOut points out at one row of contiguous values: feat (nf values),
// ids (ni values), keys (nk values), as a Set holds them.
func (p *rowParser) rowOut(out *rowOut, feat []float32, label *int32, tgt []float32, ids []int32, keys []int64) {
	out.feat, out.ids, out.keys = out.feat[:0], out.ids[:0], out.keys[:0]
	for _, fs := range p.feats {
		out.feat = append(out.feat, feat[fs.off:fs.off+fs.c.Width()])
	}
	for _, s := range p.ids {
		if s.kind.wide() {
			out.ids, out.keys = append(out.ids, nil), append(out.keys, keys[s.off:s.off+s.c.Width()])
		} else {
			out.ids, out.keys = append(out.ids, ids[s.off:s.off+s.c.Width()]), append(out.keys, nil)
		}
	}
	out.label, out.tgt = label, tgt
}

// idKind is how an ids spec reads its fields.
type idKind uint8

const (
	idsInteger idKind = iota // int32 ids, taken as they are
	idsBuckets               // hash_buckets: int32 ids hashed into [0, buckets)
	keysHash64               // key: hash64: int64 keys, the whole hash
	keysInt64                // key: int64: int64 keys, taken as they are
	keysUint64               // key: uint64: int64 keys, an unsigned integer's bits
	idsVocab   idKind = 10   // vocab: int32 ids of a vocabulary
)

// wide says whether the kind yields int64 keys.
func (k idKind) wide() bool { return k >= keysHash64 && k <= keysUint64 }

// hashed says whether the kind hashes its fields' bytes.
func (k idKind) hashed() bool { return k == idsBuckets || k == keysHash64 }

// idSpec is an ids spec: its values go to the row's ids (int32), or to
// its keys (int64), from off.
type idSpec struct {
	c       *dsl.Column
	kind    idKind
	off     int
	buckets int      // idsBuckets: the buckets
	seeds   []uint64 // hashed kinds: the hash state of each column (columnHash, or fnvOffset64 shared)
	bound   int      // integer ids: num_ids (0: not stated)
	sep     byte     // a multi-valued column: the separator (its width is max_len); 0: one id a field
	// vocabs, for kind idsVocab: each column's vocabulary (one shared by
	// all for a file's, or shared_space), and the id its ids start at.
	vocabs []*vocabIndex
	base   []int32
}

// log1pSmall holds float32(ln(1+n)) of the small integers most count
// features hold: the log transform of an integer field is a lookup.
var log1pSmall = func() (t [1024]float32) {
	for n := range t {
		t[n] = float32(math.Log1p(float64(n)))
	}
	return t
}()

func newRowParser(spec *dsl.Data) *rowParser {
	p := &rowParser{spec: spec, file: spec.CSV, delim: spec.Delimiter, width: -1}
	if p.delim == 0 {
		p.delim = ','
	}
	p.sp.Delim = p.delim
	for _, c := range spec.Columns() {
		for _, col := range c.Cols {
			p.need = max(p.need, col+1)
		}
	}
	for _, c := range spec.Features {
		p.feats = append(p.feats, featSpec{c: c, off: p.nf})
		p.nf += c.Width()
	}
	if c := spec.Label; c != nil && c.Float {
		p.nt = len(c.Cols)
	}
	for _, c := range spec.IDs {
		s := idSpec{c: c, off: p.ni, buckets: c.HashBuckets, bound: c.NumIDs, sep: c.Separator}
		switch {
		case c.KeyType == dsl.KeyHash64:
			s.kind = keysHash64
		case c.KeyType == dsl.KeyInt64:
			s.kind = keysInt64
		case c.KeyType == dsl.KeyUint64:
			s.kind = keysUint64
		case c.Vocab != nil:
			s.kind = idsVocab
		case c.HashBuckets > 0:
			s.kind = idsBuckets
		}
		if s.kind.hashed() {
			spaces := c.Cols
			if c.HashCols != nil {
				spaces = c.HashCols
			}
			for _, col := range spaces {
				h := columnHash(col)
				if c.SharedSpace {
					h = fnvOffset64
				}
				s.seeds = append(s.seeds, h)
			}
		}
		if s.kind.wide() {
			s.off = p.nk
			p.nk += c.Width()
		} else {
			p.ni += c.Width()
		}
		p.ids = append(p.ids, s)
	}
	p.truncated = make([]int64, len(p.ids))
	p.setVocabs(nil)
	return p
}

// errAt is an error in line `line` of the data file.
func (p *rowParser) errAt(line int, format string, args ...any) error {
	if p.where != nil {
		return fmt.Errorf("%s: %s", p.where(), fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("%s:%d: %s", p.file, line, fmt.Sprintf(format, args...))
}

func (p *rowParser) delimName() string {
	if p.delim == '\t' {
		return "tab"
	}
	return strconv.Quote(string(p.delim))
}

// header reads the header line (data.header): the width every row must
// have. The names were checked against the model when it was loaded.
func (p *rowParser) header(line []byte, lineNo int) error {
	if err := p.sp.Split(line); err != nil {
		return p.quoteErr(lineNo, err)
	}
	p.width, p.widthLine = len(p.sp.Fields), lineNo
	return nil
}

// quoteErr is a quoting error of the record starting at line lineNo.
func (p *rowParser) quoteErr(lineNo int, err error) error {
	qe, ok := err.(*csvrow.Error)
	if !ok {
		return err
	}
	if p.where != nil {
		return fmt.Errorf("%s: column %d of the row's line %d: %s (data at %s)", p.where(), qe.Col, qe.Line+1, qe.Msg, p.spec.Pos)
	}
	return fmt.Errorf("%s:%s (data at %s)", p.file, qe.At(lineNo), p.spec.Pos)
}

// colName is a file column as messages name it: its number, and its name
// when the file has names; a tfrecord's feature by its key, a parquet
// file's column by its name (their numbers are psgraph's, not the file's).
func (p *rowParser) colName(col int) string {
	if p.spec.Format == dsl.FormatTFRecord && col < len(p.spec.Names) {
		return fmt.Sprintf("feature %q", p.spec.Names[col])
	}
	if p.spec.Format == dsl.FormatParquet && col < len(p.spec.Names) {
		return fmt.Sprintf("column %q", p.spec.Names[col])
	}
	if col < len(p.spec.Names) {
		return fmt.Sprintf("column %d (%s)", col, p.spec.Names[col])
	}
	return fmt.Sprintf("column %d", col)
}

// parse reads the row in line (trimmed, not blank) into out: the values
// of each features and ids spec, the label (a class id, or nt float
// targets), whichever the model declares.
func (p *rowParser) parse(line []byte, lineNo int, out *rowOut) error {
	if err := p.split(line); err != nil {
		return p.quoteErr(lineNo, err)
	}
	if p.width < 0 {
		p.width, p.widthLine = len(p.fields), lineNo
		if p.where != nil && p.need <= p.width {
			p.widthWhere = p.where()
		}
		if p.need > p.width {
			if p.where != nil { // a short first row of a stream does not set the width
				defer func() { p.width = -1 }()
			}
			hint := ""
			if p.width == 1 && p.delim != '\t' && bytes.IndexByte(p.fields[0], '\t') >= 0 {
				hint = "; its fields are separated by tabs: add delimiter: tab to data"
			}
			return p.errAt(lineNo, "the model reads column %d but rows have %d columns (0 to %d) separated by %s%s; check the column ranges in data (%s)", p.need-1, p.width, p.width-1, p.delimName(), hint, p.spec.Pos)
		}
	} else if len(p.fields) != p.width {
		first := "the first row"
		if p.spec.Header {
			first = "the header"
		}
		at := fmt.Sprintf("line %d", p.widthLine)
		if p.where != nil {
			first, at = "the stream's first row", p.widthWhere
		}
		return p.errAt(lineNo, "line has %d fields separated by %s, but %s (%s) has %d; fix the line or the delimiter (data at %s)", len(p.fields), p.delimName(), first, at, p.width, p.spec.Pos)
	}
	return p.parseFields(lineNo, out)
}

// split cuts line into p.fields at the delimiter (RFC 4180 quoting),
// each field trimmed.
func (p *rowParser) split(line []byte) error {
	err := p.sp.Split(line)
	p.fields = p.sp.Fields
	return err
}

// parseFields reads the row split into p.fields (at least p.need of
// them) into out.
func (p *rowParser) parseFields(lineNo int, out *rowOut) error {
	for i, fs := range p.feats {
		c, out := fs.c, out.feat[i]
		for k, col := range c.Cols {
			var v float64
			if p.isInt != nil && p.isInt[col] { // as parseInt or parseNumber would read its text
				n := p.ints[col]
				if c.Transform == "log" && n >= 0 && n < int64(len(log1pSmall)) {
					out[k] = log1pSmall[n]
					continue
				}
				if v = float64(n); c.Transform == "log" && v > 0 {
					v = math.Log1p(v)
				}
				out[k] = float32(v)
				continue
			}
			f := p.fields[col]
			if len(f) == 0 {
				if c.Fill == nil {
					return p.errAt(lineNo, "%s is empty; add fill: VALUE to %s (%s) to stand in for missing values", p.colName(col), c.Key(), c.Pos)
				}
				v = *c.Fill
			} else if n, ok := parseInt(f); ok {
				if c.Transform == "log" && n >= 0 && n < int64(len(log1pSmall)) {
					out[k] = log1pSmall[n]
					continue
				}
				v = float64(n)
			} else if v, ok = parseNumber(f); !ok {
				hint := "fields must be numbers"
				if lineNo == 1 && !p.spec.Header && p.where == nil && p.spec.Format == "" {
					hint = "is it a header line? add header: true to data"
				}
				return p.errAt(lineNo, "%s: %q is not a number (%s; data at %s)", p.colName(col), f, hint, p.spec.Pos)
			}
			if c.Transform == "log" && v > 0 {
				v = math.Log1p(v)
			}
			out[k] = float32(v)
		}
	}
	if c := p.spec.Label; c != nil && c.Float {
		for k, col := range c.Cols {
			v, err := p.labelValue(c, p.labelField(col), col, lineNo)
			if err != nil {
				return err
			}
			out.tgt[k] = float32(v)
		}
	} else if c != nil {
		col := c.Cols[0]
		var v int32
		var err error
		switch {
		case c.Vocab != nil:
			v, err = p.labelClass(c, p.fields[col], col, lineNo)
		case p.isInt != nil && p.isInt[col] && c.Threshold == nil && p.ints[col] >= 0 && p.ints[col] <= math.MaxInt32:
			v = int32(p.ints[col]) // as integer reads its text
		case c.Positive != nil || c.Threshold != nil:
			var x float64
			x, err = p.labelValue(c, p.labelField(col), col, lineNo)
			v = int32(x)
		default:
			v, err = p.integer(c, p.labelField(col), col, lineNo, "label")
		}
		if err != nil {
			return err
		}
		*out.label = v
	}
	for j := range p.ids {
		if err := p.parseIDs(&p.ids[j], j, lineNo, out); err != nil {
			return err
		}
	}
	return nil
}

// labelField is the label column col's field: its text, or a typed
// integer's (typedCols gives the label typed where its reading of the
// integer and of its text agree: not positive's, not a vocabulary's); a
// threshold's or a float label's reading of it, and an error naming it,
// are those of its text.
func (p *rowParser) labelField(col int) []byte {
	if p.isInt != nil && p.isInt[col] {
		p.labelText = strconv.AppendInt(p.labelText[:0], p.ints[col], 10)
		return p.labelText
	}
	return p.fields[col]
}

// labelValue maps a label field to its value: 1 or 0 by positive or
// threshold, else the number it holds.
func (p *rowParser) labelValue(c *dsl.Column, f []byte, col, lineNo int) (float64, error) {
	if len(f) == 0 {
		return 0, p.errAt(lineNo, "%s is empty, but it is the label %q (%s); every row needs its label: fix or drop the line", p.colName(col), c.Name, c.Pos)
	}
	if c.Positive != nil {
		for _, v := range c.Positive {
			if string(f) == v {
				return 1, nil
			}
		}
		return 0, nil
	}
	v, ok := parseNumber(f)
	if !ok {
		hint := "fix the row or choose another column"
		switch {
		case c.Threshold != nil:
			hint = "threshold compares numbers; for string labels write positive: VALUE (or a list) instead"
		case !c.Float:
		default:
			hint = fmt.Sprintf("for string labels write positive: %q (the value of the positive class; every other value is 0), or vocab: {min_count: 1} for class ids", f)
		}
		return 0, p.errAt(lineNo, "%s: %q is not a number, but it is the label %q (%s); %s", p.colName(col), f, c.Name, c.Pos, hint)
	}
	if c.Threshold != nil {
		if v >= *c.Threshold {
			return 1, nil
		}
		return 0, nil
	}
	return v, nil
}
