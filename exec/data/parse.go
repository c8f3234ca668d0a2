package data

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/internal/csvrow"
)

// maxLine bounds the length of one line of a data file.
const maxLine = 1 << 26

// HashID is the bucket of a hashed id field (data.ids with hash_buckets):
//
//	h = FNV-1a 64 over the 4 bytes of col (little-endian uint32), then the field's bytes
//	h ^= h >> 33; h *= 0xff51afd7ed558ccd; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53; h ^= h >> 33
//	bucket = (h * buckets) >> 64, the high 64 bits of the 128-bit product
//
// col is the field's column in the file (counting from 0), so the same
// string in two columns lands in unrelated buckets of the one shared range.
// The second line is murmur3's 64-bit finalizer: FNV-1a alone moves a
// key's last bytes into few bits of h, so keys differing in their last
// character would crowd into few buckets. After it every bit of h is
// mixed, and the multiply maps h onto the buckets without a division. The
// hash has no seed and does not depend on the Go version or the machine: a
// table trained today reads the same rows tomorrow, and any language can
// compute it (Python: (h * buckets) >> 64 with h masked to 64 bits).
func HashID(col int, field []byte, buckets int) int32 {
	return bucketOf(hashKey(columnHash(col), field), buckets)
}

// SharedHashID is the bucket of a field of a spec with shared_space: true:
// HashID without the column, FNV-1a 64 over the field's bytes alone, so a
// string has one id in every column of every shared spec of the same
// buckets:
//
//	h = FNV-1a 64 over the field's bytes
//	(then the same finalizer and multiply as HashID)
func SharedHashID(field []byte, buckets int) int32 {
	return bucketOf(hashKey(fnvOffset64, field), buckets)
}

// HashKey is the 64-bit key of a field of an ids spec with key: hash64:
// the hash of HashID without the bucket map, as an int64,
//
//	h = FNV-1a 64 over the 4 bytes of col (little-endian uint32), then the field's bytes
//	h ^= h >> 33; h *= 0xff51afd7ed558ccd; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53; h ^= h >> 33
//	key = h as a two's-complement int64, except 2^63 (the padding key's bits), which is -2^63 + 1
//
// so a field keeps its 64 bits and distinct strings collide only by
// chance (about K²/2^65 pairs among K strings).
func HashKey(col int, field []byte) int64 {
	return ir.HashKey(hashKey(columnHash(col), field))
}

// SharedHashKey is the 64-bit key of a field of a spec with key: hash64
// and shared_space: true: HashKey without the column, the same key in
// every column of every shared spec.
func SharedHashKey(field []byte) int64 {
	return ir.HashKey(hashKey(fnvOffset64, field))
}

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// columnHash is the FNV-1a 64 state after a column's 4 bytes: the state a
// field of that column is hashed from (its hash space).
func columnHash(col int) uint64 {
	h := uint64(fnvOffset64)
	c := uint32(col)
	for i := 0; i < 4; i++ {
		h ^= uint64(byte(c >> (8 * i)))
		h *= fnvPrime64
	}
	return h
}

// hashKey is the 64-bit key of a field: FNV-1a 64 continued from state h
// (a column's, or the offset basis for a shared space) over the field's
// bytes, then murmur3's 64-bit finalizer. Every hashed id goes through
// it: a bucket is bucketOf(hashKey(...)), a 64-bit key ir.HashKey(hashKey(...)).
func hashKey(h uint64, field []byte) uint64 {
	for _, b := range field {
		h ^= uint64(b)
		h *= fnvPrime64
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// bucketOf maps a 64-bit key onto [0, buckets): the high 64 bits of the
// 128-bit product, a multiply instead of a division.
func bucketOf(h uint64, buckets int) int32 {
	hi, _ := bits.Mul64(h, uint64(buckets))
	return int32(hi)
}

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
	// typed are, for a tfrecord or parquet reader, the columns whose one
	// value it gave as an integer rather than as text (typed: false, the
	// text in fields): the value the text would parse to, without its
	// formatting and parsing. Only columns read by features specs alone
	// are given so (typedCols).
	typed  []typedValue
	nf, ni int
	nk     int // int64 keys (ids specs with key)
	nt     int // float label (target) columns; 0 for class ids
	feats  []featSpec
	ids    []idSpec
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

// typedValue is a column's one value given as an integer, i, where
// typed; or, where hashed, as its hash, h (hashKey of its bytes from the
// column's seed), for a column a reader may give so (hashedCols).
type typedValue struct {
	typed, hashed bool
	i             int64
	h             uint64
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
// those read by features specs alone.
func typedCols(spec *dsl.Data, n int) []bool {
	k := make([]bool, n)
	for _, c := range spec.Features {
		for _, col := range c.Cols {
			k[col] = true
		}
	}
	other := append([]*dsl.Column{}, spec.IDs...)
	if spec.Label != nil {
		other = append(other, spec.Label)
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
			if p.typed != nil && p.typed[col].typed { // as parseInt or parseNumber would read its text
				n := p.typed[col].i
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
			v, err := p.labelValue(c, p.fields[col], col, lineNo)
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
		case c.Positive != nil || c.Threshold != nil:
			var x float64
			x, err = p.labelValue(c, p.fields[col], col, lineNo)
			v = int32(x)
		default:
			v, err = p.integer(c, p.fields[col], col, lineNo, "label")
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

// parseIDs reads the fields of ids spec s (the j-th) into out.
func (p *rowParser) parseIDs(s *idSpec, j, lineNo int, out *rowOut) error {
	var err error
	switch {
	case s.c.MaxLen > 0:
		if s.kind.wide() {
			return p.multiKeys(s, j, lineNo, out.keys[j])
		}
		return p.multi(s, j, lineNo, out.ids[j])
	case s.kind == idsBuckets:
		seeds, out, buckets := s.seeds, out.ids[j], s.buckets
		for k, col := range s.c.Cols {
			if p.typed != nil && p.typed[col].hashed {
				out[k] = bucketOf(p.typed[col].h, buckets)
				continue
			}
			out[k] = bucketOf(hashKey(seeds[k], p.fields[col]), buckets)
		}
	case s.kind == keysHash64:
		seeds, out := s.seeds, out.keys[j]
		for k, col := range s.c.Cols {
			if p.typed != nil && p.typed[col].hashed {
				out[k] = ir.HashKey(p.typed[col].h)
				continue
			}
			out[k] = ir.HashKey(hashKey(seeds[k], p.fields[col]))
		}
	case s.kind == keysInt64 || s.kind == keysUint64:
		out := out.keys[j]
		for k, col := range s.c.Cols {
			if out[k], err = p.key(s, p.fields[col], col, lineNo); err != nil {
				return err
			}
		}
	case s.kind == idsVocab:
		out := out.ids[j]
		for k, col := range s.c.Cols {
			if out[k], err = p.vocabID(s, k, p.fields[col], col, lineNo); err != nil {
				return err
			}
		}
	default:
		out := out.ids[j]
		for k, col := range s.c.Cols {
			if out[k], err = p.id(s, p.fields[col], col, lineNo); err != nil {
				return err
			}
		}
	}
	return nil
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

// id reads an integer id field f (of column col) of ids spec s, checked
// against its num_ids.
func (p *rowParser) id(s *idSpec, f []byte, col, lineNo int) (int32, error) {
	v, err := p.integer(s.c, f, col, lineNo, "ids")
	if err == nil && s.bound > 0 && int(v) >= s.bound {
		err = p.errAt(lineNo, "%s: id %d is not below num_ids %d of %s %q (%s); fix the row or raise num_ids (and the rows of the tables it reads)", p.colName(col), v, s.bound, s.c.Key(), s.c.Name, s.c.Pos)
	}
	return v, err
}

// pieceIter walks the values of a multi-valued column: the pieces of a
// text field between separators, or a list a tfrecord or parquet reader
// gave. Empty values hold no id.
type pieceIter struct {
	rest   []byte
	sep    byte
	list   [][]byte
	isList bool
}

// pieces walks the values of column col.
func (p *rowParser) pieces(col int, sep byte) pieceIter {
	if p.lists != nil && p.lists[col] != nil {
		return pieceIter{list: p.lists[col], isList: true}
	}
	if sep == 0 { // one value
		return pieceIter{list: p.fields[col : col+1], isList: true}
	}
	return pieceIter{rest: p.fields[col], sep: sep}
}

func (it *pieceIter) next() ([]byte, bool) {
	for {
		var piece []byte
		if it.isList {
			if len(it.list) == 0 {
				return nil, false
			}
			piece, it.list = it.list[0], it.list[1:]
		} else {
			if len(it.rest) == 0 {
				return nil, false
			}
			piece, it.rest = nextPiece(it.rest, it.sep)
		}
		if len(piece) > 0 {
			return piece, true
		}
	}
}

// nextPiece splits the next piece off a multi-valued field: the bytes up
// to the separator, trimmed of spaces, and the rest after it (nil after
// the last piece).
func nextPiece(rest []byte, sep byte) (piece, after []byte) {
	piece = rest
	if i := bytes.IndexByte(rest, sep); i >= 0 {
		piece, after = rest[:i], rest[i+1:]
	}
	if len(piece) > 0 && (piece[0] <= ' ' || piece[len(piece)-1] <= ' ') {
		piece = dsl.TrimField(piece, sep)
	}
	return piece, after
}

// multi reads the field of a multi-valued ids column into out (max_len
// slots): its ids in order, then -1 in the slots left. Empty pieces
// (between two separators, or an empty field) hold no id; past max_len
// ids the rest of the field is dropped and the field counted in
// truncated[j].
func (p *rowParser) multi(s *idSpec, j, lineNo int, out []int32) error {
	col, n := s.c.Cols[0], 0
	it := p.pieces(col, s.sep)
	for {
		piece, ok := it.next()
		if !ok {
			break
		}
		if n == len(out) {
			p.truncated[j]++
			break
		}
		switch s.kind {
		case idsBuckets:
			out[n] = bucketOf(hashKey(s.seeds[0], piece), s.buckets)
		case idsVocab:
			v, err := p.vocabID(s, 0, piece, col, lineNo)
			if err != nil {
				return err
			}
			out[n] = v
		default:
			v, err := p.id(s, piece, col, lineNo)
			if err != nil {
				return err
			}
			out[n] = v
		}
		n++
	}
	for ; n < len(out); n++ {
		out[n] = -1
	}
	return nil
}

// multiKeys is multi for int64 keys: the field's keys in order, hashed
// (key: hash64) or integers (key: int64), then ir.PadKey in the slots
// left.
func (p *rowParser) multiKeys(s *idSpec, j, lineNo int, out []int64) error {
	col, n := s.c.Cols[0], 0
	it := p.pieces(col, s.sep)
	for {
		piece, ok := it.next()
		if !ok {
			break
		}
		if n == len(out) {
			p.truncated[j]++
			break
		}
		if s.kind == keysHash64 {
			out[n] = ir.HashKey(hashKey(s.seeds[0], piece))
		} else {
			v, err := p.key(s, piece, col, lineNo)
			if err != nil {
				return err
			}
			out[n] = v
		}
		n++
	}
	for ; n < len(out); n++ {
		out[n] = ir.PadKey
	}
	return nil
}

// key reads an int64 key field f (of column col) of a spec with key:
// int64 (a decimal integer of the int64 range) or key: uint64 (one of the
// uint64 range, its bits as an int64), other than the padding key.
func (p *rowParser) key(s *idSpec, f []byte, col, lineNo int) (int64, error) {
	c := s.c
	if len(f) == 0 {
		if c.Fill != nil {
			return c.FillKey, nil
		}
		return 0, p.errAt(lineNo, "%s is empty; add fill: KEY to %s (%s) to stand in for missing keys, or key: hash64 to hash the column's strings", p.colName(col), c.Key(), c.Pos)
	}
	var v int64
	var ok bool
	if s.kind == keysUint64 {
		var u uint64
		u, ok = parseUint64(f)
		v = int64(u)
	} else {
		v, ok = parseInt64(f)
	}
	switch {
	case !ok && s.kind == keysUint64:
		return 0, p.errAt(lineNo, "%s: %q is not an integer of the uint64 range (0 to 18446744073709551615), because it is read as uint64 keys %q (%s, key: uint64); fix the row, or write key: hash64 to hash the column's strings", p.colName(col), f, c.Name, c.Pos)
	case !ok:
		hint := "write key: hash64 to hash the column's strings"
		if u, isU := parseUint64(f); isU && u >= 1<<63 {
			hint = "it is an unsigned 64-bit integer: write key: uint64"
		}
		return 0, p.errAt(lineNo, "%s: %q is not an integer of the int64 range, because it is read as int64 keys %q (%s, key: int64); fix the row, or %s", p.colName(col), f, c.Name, c.Pos, hint)
	case v == ir.PadKey:
		return 0, p.errAt(lineNo, "%s: key %s is the padding key of int64 keys (-2^63, 2^63 as uint64), which %s %q (%s) cannot hold; fix the row, or write key: hash64 to hash the column", p.colName(col), f, c.Key(), c.Name, c.Pos)
	}
	return v, nil
}

// parseUint64 reads an unsigned decimal integer of the uint64 range.
func parseUint64(b []byte) (uint64, bool) {
	if len(b) > 0 && b[0] == '+' {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// integer reads a non-negative int32 of a label or an integer ids field f
// (of column col).
func (p *rowParser) integer(c *dsl.Column, f []byte, col, lineNo int, what string) (int32, error) {
	if len(f) == 0 {
		if c.Fill != nil {
			return int32(*c.Fill), nil
		}
		if what == "label" {
			return 0, p.errAt(lineNo, "%s is empty, but it is the label %q (%s); every row needs a label: fix or drop the line", p.colName(col), c.Name, c.Pos)
		}
		return 0, p.errAt(lineNo, "%s is empty; add fill: ID to %s (%s) to stand in for missing ids, or hash_buckets: N to hash the column's strings", p.colName(col), c.Key(), c.Pos)
	}
	if n, ok := parseInt(f); ok && n >= 0 && n <= math.MaxInt32 {
		return int32(n), nil
	}
	v, ok := parseNumber(f)
	if !ok || v != math.Trunc(v) || v < 0 || v > math.MaxInt32 {
		hint := "fix the row or choose another column"
		switch {
		case what == "label" && !ok:
			hint = fmt.Sprintf("for string labels write positive: %q (the value of the positive class; every other value is 0), or vocab: {min_count: 1} to number the classes", f)
		case what == "label":
			hint = "fix the row, add dtype: float32 to data.label to read float targets (regression), or threshold: X to make values of at least X the positive class"
		case what == "ids" && !ok:
			hint = fmt.Sprintf("add hash_buckets: N or vocab: {min_count: 1} to %s to map strings to ids, or fix the row", c.Key())
		}
		return 0, p.errAt(lineNo, "%s: %q must be a non-negative integer, because it is read as %s %q (%s); %s", p.colName(col), f, what, c.Name, c.Pos, hint)
	}
	return int32(v), nil
}

// parseInt reads an optionally signed decimal integer of at most 18
// digits, the common case of a data field, without strconv's string.
func parseInt(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// parseInt64 reads an optionally signed decimal integer of the int64
// range, -2^63 to 2^63-1.
func parseInt64(b []byte) (int64, bool) {
	if n, ok := parseInt(b); ok {
		return n, true
	}
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) > 0 && b[0] == '+' { // parseUint64 takes a sign of its own
			return 0, false
		}
	}
	n, ok := parseUint64(b)
	switch {
	case ok && neg && n <= 1<<63:
		return int64(-n), true
	case ok && !neg && n < 1<<63:
		return int64(n), true
	}
	return 0, false
}

// parseNumber reads a finite number.
func parseNumber(b []byte) (float64, bool) {
	if n, ok := parseInt(b); ok {
		return float64(n), true
	}
	// A short []byte to string conversion that does not escape is made on
	// the stack; strconv copies its input into errors.
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}
