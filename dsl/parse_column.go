package dsl

// One column spec of the data section (features, label, ids): its fields and the columns it reads.

import (
	"math"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/dsl/ir"
	"gopkg.in/yaml.v3"
)

var (
	featureKeys = []string{"name", "column", "columns", "fill", "transform"}
	labelKeys   = []string{"name", "column", "columns", "dtype", "positive", "threshold", "vocab"}
	idKeys      = []string{"name", "column", "columns", "fill", "hash_buckets", "key", "shared_space", "num_ids", "separator", "max_len", "vocab"}
)

// column decodes a data variable's column spec; allowed says which keys
// its kind takes (a label has column, the others a columns range).
func (d *decoder) column(n *yaml.Node, what string, allowed []string) *Column {
	c := &Column{Pos: d.pos(n), what: what, isFeatures: contains(allowed, "transform")}
	var at columnNodes
	ok := d.fields(n, what, allowed, func(key string, k, v *yaml.Node) {
		if !d.columnRange(c, what, key, v) {
			d.columnField(c, &at, what, allowed, key, k, v)
		}
	})
	if !ok {
		return c
	}
	if c.Name == "" {
		d.errorf(n, "%s needs a name", what)
	}
	d.checkColumn(c, &at, what)
	return c
}

// columnNodes are the keys of a column spec that its checks point at.
type columnNodes struct{ hash, shared, num, maxLen, key, fill, positive, threshold, vocab, dtype *yaml.Node }

// columnRange decodes a column spec's name and columns (false: key is
// another one). A column is a number (counting from 0) or a name; columns
// are a list of them, each entry also a range A..B (both ends included),
// or a range alone (columns: I1..I13). A list of exactly two numbers is
// the half-open range [first, end).
func (d *decoder) columnRange(c *Column, what, key string, v *yaml.Node) bool {
	switch key {
	case "name":
		c.Name, _ = d.str(v, what+".name")
	case "column":
		c.rangePos, c.rangeKey = d.pos(v), key
		if v.Kind == yaml.ScalarNode && v.Tag == "!!str" { // a name
			if strings.Contains(v.Value, "..") {
				d.errorf(v, "%s.column is one column, and %q is a range; write columns: %s for a range", what, v.Value, v.Value)
				return true
			}
			c.refs = []colRef{{name: v.Value, num: -1}}
		} else if x, ok := d.integer(v, what+".column"); ok {
			if x < 0 {
				d.errorf(v, "%s.column must be >= 0, got %d", what, x)
			}
			c.refs = []colRef{{num: x}}
		}
	case "columns":
		c.rangePos, c.rangeKey = d.pos(v), key
		c.refs = d.columnRefs(v, what)
	default:
		return false
	}
	return true
}

// columnRefs decodes a columns value into the columns as written.
func (d *decoder) columnRefs(v *yaml.Node, what string) []colRef {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!str" {
		if r, ok := d.rangeRef(v, what); ok {
			return []colRef{r}
		}
		d.errorf(v, "%s.columns %q is one name; write column: %s for one column, a list [A, B, C], or a range A..B (both ends included)", what, v.Value, v.Value)
		return nil
	}
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
		d.errorf(v, "%s.columns must be a list of columns (names or numbers, e.g. [I1, I5, C3]) or a range A..B, e.g. I1..I13 or 1..13 (both ends included), got %s", what, kindName(v))
		return nil
	}
	isNum := func(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!int" }
	if len(v.Content) == 2 && isNum(v.Content[0]) && isNum(v.Content[1]) { // [first, end)
		r, ok := d.ints(v, what+".columns")
		if !ok {
			return nil
		}
		if r[0] < 0 || r[1] <= r[0] {
			d.errorf(v, "%s.columns: two numbers are a half-open range [first, end) with 0 <= first < end, e.g. [0, 64] for columns 0 to 63, got %s; to list columns %d and %d write [%d..%d, %d..%d], and a range with both ends included is %d..%d", what, intList(r), r[0], r[1], r[0], r[0], r[1], r[1], min(r[0], r[1]), max(r[0], r[1]))
			return nil
		}
		return []colRef{{num: r[0], to: &colRef{num: r[1] - 1}}}
	}
	var out []colRef
	for _, it := range v.Content {
		switch {
		case isNum(it):
			x, ok := d.integer(it, what+".columns entry")
			if ok && x < 0 {
				d.errorf(it, "%s.columns: column %d is negative; columns count from 0", what, x)
				ok = false
			}
			if ok {
				out = append(out, colRef{num: x})
			}
		case it.Kind == yaml.ScalarNode && it.Tag == "!!str":
			if r, ok := d.rangeRef(it, what); ok {
				out = append(out, r)
			} else if !strings.Contains(it.Value, "..") {
				out = append(out, colRef{name: it.Value, num: -1})
			}
		default:
			d.errorf(it, "%s.columns entry must be a column name, a number or a range A..B, got %s", what, kindName(it))
		}
	}
	return out
}

// rangeRef decodes a range A..B of names or numbers (false: not a range,
// or a malformed one, reported).
func (d *decoder) rangeRef(v *yaml.Node, what string) (colRef, bool) {
	a, b, ok := strings.Cut(v.Value, "..")
	if !ok {
		return colRef{}, false
	}
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	if a == "" || b == "" || strings.Contains(b, "..") {
		d.errorf(v, "%s.columns: %q is not a range; write FIRST..LAST, e.g. I1..I13 or 1..13 (both ends included)", what, v.Value)
		return colRef{}, false
	}
	ref := func(s string) colRef {
		if x, err := strconv.Atoi(s); err == nil && x >= 0 {
			return colRef{num: x}
		}
		return colRef{name: s, num: -1}
	}
	from, to := ref(a), ref(b)
	if (from.num < 0) != (to.num < 0) {
		d.errorf(v, "%s.columns: %q mixes a name and a number; give both ends by name or both by number", what, v.Value)
		return colRef{}, false
	}
	if from.num >= 0 && to.num < from.num {
		d.errorf(v, "%s.columns: range %q runs backwards; write %d..%d", what, v.Value, to.num, from.num)
		return colRef{}, false
	}
	from.to = &to
	return from, true
}

// columnField decodes the other keys of a column spec.
func (d *decoder) columnField(c *Column, at *columnNodes, what string, allowed []string, key string, k, v *yaml.Node) {
	switch key {
	case "positive":
		at.positive = k
		if v.Kind == yaml.SequenceNode {
			c.Positive, _ = d.strings(v, what+".positive")
		} else if v.Kind == yaml.ScalarNode && v.Value != "" {
			c.Positive = []string{v.Value}
		} else {
			d.errorf(v, "%s.positive must be a value or a list of values (the label values that are the positive class, 1), got %s", what, kindName(v))
		}
	case "threshold":
		at.threshold = k
		if x, ok := d.number(v, what+".threshold"); ok {
			c.Threshold = &x
		}
	case "vocab":
		at.vocab = k
		oov := 1
		if what == "data.label" {
			oov = 0
		}
		c.Vocab = d.vocab(v, what, oov)
	case "dtype":
		at.dtype = k
		if s, ok := d.str(v, what+".dtype"); ok {
			switch s {
			case "float32":
				c.Float = true
			case "int32":
			default:
				d.errorf(v, "%s.dtype %q is not int32 (class ids, the default) or float32 (targets of a regression or a binary cross entropy)", what, s)
			}
		}
	case "fill":
		c.fillPos, at.fill = d.pos(k), v
		if contains(allowed, "hash_buckets") { // ids: an integer id or key, checked with the spec
			if x, ok := d.int64(v, what+".fill"); ok {
				f := float64(x)
				c.Fill, c.FillKey = &f, x
			}
		} else if x, ok := d.number(v, what+".fill"); ok {
			c.Fill = &x
		}
	case "transform":
		if s, ok := d.str(v, what+".transform"); ok {
			if !contains(transformNames, s) {
				d.errorf(v, "%s.transform %q is not one of %s%s", what, s, strings.Join(transformNames, ", "), suggest(s, transformNames))
			} else if s != "none" {
				c.Transform = s
			}
		}
	case "hash_buckets":
		at.hash = k
		if x, ok := d.integer(v, what+".hash_buckets"); ok {
			if x <= 0 || x > math.MaxInt32 {
				d.errorf(v, "%s.hash_buckets must be in [1, %d] (ids are int32), got %d; without hash_buckets the fields are integer ids, taken as they are", what, math.MaxInt32, x)
			} else {
				c.HashBuckets = x
			}
		}
	case "key":
		at.key = k
		if s, ok := d.str(v, what+".key"); ok {
			if !contains(KeyNames, s) {
				d.errorf(v, "%s.key %q is not hash64 (each field's bytes hashed to a 64-bit key), int64 (each field an integer, taken as it is) or uint64 (an unsigned 64-bit integer, its bits taken as an int64 key)%s", what, s, suggest(s, KeyNames))
			} else {
				c.KeyType = s
			}
		}
	case "shared_space":
		at.shared = k
		c.SharedSpace, _ = d.boolean(v, what+".shared_space")
	case "num_ids":
		at.num = k
		if x, ok := d.integer(v, what+".num_ids"); ok {
			if x <= 0 || x > math.MaxInt32 {
				d.errorf(v, "%s.num_ids must be in [1, %d] (ids are int32), got %d", what, math.MaxInt32, x)
			} else {
				c.NumIDs = x
			}
		}
	case "separator":
		c.sepPos = d.pos(k)
		if s, ok := d.str(v, what+".separator"); ok {
			if len(s) != 1 || s[0] == '\n' || s[0] == '\r' || s[0] == '"' || s[0] == ' ' || s[0] >= 0x80 {
				d.errorf(v, "%s.separator must be one ASCII character other than a newline, a space or a quote (e.g. \"|\"), got %q", what, s)
			} else {
				c.Separator = s[0]
			}
		}
	case "max_len":
		at.maxLen = k
		if x, ok := d.integer(v, what+".max_len"); ok {
			if x <= 0 {
				d.errorf(v, "%s.max_len must be positive, got %d", what, x)
			} else {
				c.MaxLen = x
			}
		}
	}
}

// checkColumn refuses keys of a column spec that do not go together.
func (d *decoder) checkColumn(c *Column, at *columnNodes, what string) {
	hashed := at.hash != nil || c.KeyType == KeyHash64 || at.vocab != nil
	switch {
	case at.hash != nil && c.Fill != nil:
		d.errs = append(d.errs, Errorf(c.fillPos, "%s.fill does not apply with hash_buckets: an empty field is hashed as a value of its own; remove fill", what))
	case c.KeyType == KeyHash64 && c.Fill != nil:
		d.errs = append(d.errs, Errorf(c.fillPos, "%s.fill does not apply with key: hash64: an empty field is hashed as a value of its own; remove fill", what))
	case c.Fill != nil && (c.KeyType == KeyInt64 || c.KeyType == KeyUint64) && c.FillKey == ir.PadKey:
		d.errorf(at.fill, "%s.fill %d is the padding key of int64 keys (-2^63); choose another key", what, c.FillKey)
	case c.Fill != nil && c.KeyType == "" && at.hash == nil && (c.FillKey < 0 || c.FillKey > math.MaxInt32):
		d.errorf(at.fill, "%s.fill must be an id in [0, %d], got %d", what, math.MaxInt32, c.FillKey)
	}
	d.checkMapping(c, at, what)
	if at.key != nil && at.hash != nil {
		d.errorf(at.key, "%s.key reads 64-bit keys, and hash_buckets hashes into int32 ids in [0, N) for a table of N rows: give one of them (key: hash64 keeps the whole 64-bit hash, with no buckets)", what)
	}
	if at.shared != nil && !hashed {
		d.errorf(at.shared, "%s.shared_space applies to hashed ids (hash_buckets, or key: hash64); integer ids are one space already: remove it", what)
	}
	if at.num != nil && at.hash != nil {
		d.errorf(at.num, "%s.num_ids is for integer ids; hashed ids are in [0, hash_buckets) already: remove num_ids", what)
	}
	if at.num != nil && at.key != nil {
		d.errorf(at.num, "%s.num_ids bounds int32 ids read by a table of num_ids rows; 64-bit keys (key: %s) have no bound: remove num_ids", what, c.KeyType)
	}
	if c.sepPos.Line > 0 {
		switch {
		case at.maxLen == nil:
			d.errs = append(d.errs, Errorf(c.sepPos, "%s.separator needs max_len: N, the most ids a field holds (the variable is [batch, N]; a field with more keeps its first N, and the run reports how many fields were cut)", what))
		case c.rangeKey == "columns" && (len(c.refs) != 1 || c.refs[0].to != nil):
			d.errs = append(d.errs, Errorf(c.rangePos, "%s.separator reads one multi-valued column, but %s.columns names several; give column: N, or one spec per column", what, what))
		}
		if c.Fill != nil {
			d.errs = append(d.errs, Errorf(c.fillPos, "%s.fill does not apply with separator: an empty field holds no ids (all padding); remove fill", what))
		}
	} else if at.maxLen != nil {
		c.maxLenPos = d.pos(at.maxLen) // checked with the data's format (checkFormat)
	}
}

var transformNames = []string{"none", "log"}
