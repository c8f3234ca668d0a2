package dsl

// The data section of a model: its file, columns and variables.

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/psgraph/psgraph/dsl/ir"
)

var dataKeys = []string{"csv", "synthetic", "features", "label", "ids", "normalize", "shuffle", "seed", "delimiter", "stream", "header", "eval",
	"kafka", "follow", "on_bad_row", "normalize_rows", "metrics_window"} // the last line: online.go

func (d *decoder) data(n *yaml.Node, dir string, g *Graph) *Data {
	data := &Data{Pos: d.pos(n), Normalize: "none", Seed: 1, Delimiter: ','}
	var at dataNodes
	d.fields(n, "data", dataKeys, func(key string, k, v *yaml.Node) { d.dataField(data, &at, dir, key, k, v) })
	d.checkEval(data, at.eval)
	d.checkOnline(data, &at)
	switch {
	case data.CSV == "" && data.Synthetic == nil && at.csv == nil && at.online.kafka == nil:
		d.errorf(n, "data needs a source: `csv: FILE` or `synthetic: {rows, features, classes}`")
	case at.csv != nil && at.syn != nil:
		d.errorf(at.syn, "data has both csv (line %d) and synthetic; keep one of them", at.csv.Line)
	}
	if data.Synthetic != nil {
		d.checkSynthetic(data, &at)
	}
	d.labelShape(data.Label)
	if data.CSV != "" && data.Online == nil && len(d.errs) == 0 {
		d.resolveNames(data)
	}
	if data.Stream && data.Shuffle {
		d.errorf(at.shuffle, "data.shuffle cannot be used with stream: true: a streamed file is read in file order, and a shuffle over all rows needs them all in memory; shuffle the file once beforehand (e.g. `shuf -o shuffled.tsv train.tsv`) and set shuffle: false, or remove stream to load the file into memory")
	}
	if data.CSV != "" && data.Online == nil && len(d.errs) == 0 {
		d.checkCSVWidth(data)
	}
	for _, c := range data.IDs {
		if c.Separator != 0 && c.Separator == data.Delimiter {
			d.errs = append(d.errs, Errorf(c.sepPos, "%s.separator %q is the data delimiter, which separates the fields; choose another character (e.g. \"|\")", c.what, string(c.Separator)))
		}
	}
	if data.Features == nil && data.Label == nil && data.IDs == nil {
		d.errorf(n, "data declares no variables: add features: {name: x, columns: [a, b]} and/or label: {name: y, column: c}")
	}
	d.declareData(g, data)
	return data
}

// dataNodes are the keys of a data section that later checks point at.
type dataNodes struct {
	csv, syn, features, ids, delim, stream, shuffle, header, eval *yaml.Node
	online                                                        onlineNodes
}

// dataField decodes one key of the data section.
func (d *decoder) dataField(data *Data, at *dataNodes, dir, key string, k, v *yaml.Node) {
	switch key {
	case "csv":
		d.csvSource(data, at, dir, v)
	case "synthetic":
		at.syn = k
		data.Synthetic = d.synthetic(v)
	case "features":
		at.features = v
		data.Features = d.specs(v, "data.features", featureKeys)
	case "label":
		data.Label = d.column(v, "data.label", labelKeys)
	case "ids":
		at.ids = k
		data.IDs = d.specs(v, "data.ids", idKeys)
	case "normalize":
		if s, ok := d.str(v, "data.normalize"); ok {
			if !contains([]string{"none", "standard", "minmax"}, s) {
				d.errorf(v, "data.normalize %q is not one of none, standard, minmax%s", s, suggest(s, []string{"none", "standard", "minmax"}))
			}
			data.Normalize, data.NormalizePos = s, d.pos(v)
		}
	case "shuffle":
		at.shuffle = v
		data.Shuffle, _ = d.boolean(v, "data.shuffle")
	case "delimiter":
		at.delim = k
		if b, ok := d.delimiter(v); ok {
			data.Delimiter = b
		}
	case "stream":
		at.stream = k
		data.Stream, _ = d.boolean(v, "data.stream")
	case "header":
		at.header = k
		data.Header, _ = d.boolean(v, "data.header")
	case "seed":
		if s, ok := d.integer(v, "data.seed"); ok {
			data.Seed = uint64(s)
		}
	case "eval":
		at.eval = k
		data.Eval = d.eval(v, dir)
	default:
		d.onlineField(at, dir, key, k, v)
	}
}

// checkSynthetic refuses what a synthetic source cannot have and gives
// its features and label their columns.
func (d *decoder) checkSynthetic(data *Data, at *dataNodes) {
	if data.IDs != nil {
		d.errorf(at.ids, "data.ids needs a csv source (synthetic data has only features and label); remove ids or use csv")
	}
	for _, c := range []struct {
		node *yaml.Node
		what string
	}{{at.delim, "data.delimiter"}, {at.stream, "data.stream"}, {at.header, "data.header"}} {
		if c.node != nil {
			d.errorf(c.node, "%s needs a csv source (synthetic data is generated in memory); remove it or use csv", c.what)
		}
	}
	if len(data.Features) > 1 {
		d.errorf(at.features, "data.features with a synthetic source is one variable of all its features: give one spec, features: {name: x}")
	}
	for _, c := range data.Features {
		if c.Fill != nil {
			d.errs = append(d.errs, Errorf(c.fillPos, "data.features.fill needs a csv source (synthetic data has no missing values); remove it"))
		}
		c.Lo, c.Hi = 0, data.Synthetic.Features
	}
	if data.Label != nil {
		data.Label.Lo, data.Label.Hi = data.Synthetic.Features, data.Synthetic.Features+1
	}
}

// declareData declares a variable of each of the data's columns.
func (d *decoder) declareData(g *Graph, data *Data) {
	for _, c := range data.Columns() {
		if c.Name == "" {
			continue
		}
		v := &Var{Name: c.Name, Kind: KindData, Pos: c.Pos, DType: c.IDType()}
		switch {
		case c == data.Label:
			v.Shape = ir.Shape{-1}
			if c.Float {
				v.DType, v.Shape = ir.F32, ir.Shape{-1, c.Hi - c.Lo}
			}
		case c.isFeatures:
			v.DType, v.Shape = ir.F32, ir.Shape{-1, c.Width()}
		default:
			v.Shape = ir.Shape{-1, c.Width()}
		}
		d.declare(g, v)
	}
}

// specs decodes data.features or data.ids: one spec (a mapping) or a list
// of specs, each its own variable.
func (d *decoder) specs(n *yaml.Node, what string, allowed []string) []*Column {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.SequenceNode {
		return []*Column{d.column(n, what, allowed)}
	}
	if len(n.Content) == 0 {
		d.errorf(n, "%s is an empty list; give one spec {name, columns, ...} or a list of them", what)
		return nil
	}
	out := make([]*Column, 0, len(n.Content))
	for i, it := range n.Content {
		out = append(out, d.column(it, fmt.Sprintf("%s[%d]", what, i), allowed))
	}
	return out
}

// checkCSVWidth compares the column ranges with the width of the CSV's
// first non-empty row, so that a bad range is reported at its YAML node.
// The data loader checks every row when it reads the file.
func (d *decoder) checkCSVWidth(data *Data) {
	f, err := os.Open(data.CSV)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<26)
	row, header := 0, data.Header
	for sc.Scan() {
		row++
		line := TrimField(sc.Text(), data.Delimiter)
		if line == "" {
			continue
		}
		if header { // the names; resolveNames checked them
			header = false
			continue
		}
		width := strings.Count(line, string(data.Delimiter)) + 1
		hint := ""
		if width == 1 && data.Delimiter != '\t' && strings.Contains(line, "\t") {
			hint = " (its lines hold tabs: add delimiter: tab to data)"
		}
		for _, c := range data.Columns() {
			if c.Hi <= width {
				continue
			}
			d.errs = append(d.errs, Errorf(c.rangePos, "%s.%s reads column %d, but %s has %d columns (0 to %d) in row %d%s; columns count from 0 and ranges are [first, end)", c.what, rangeKey(c), c.Hi-1, data.CSV, width, width-1, row, hint))
		}
		return
	}
}

// rangeKey is the key that gave a spec its columns: column or columns.
func rangeKey(c *Column) string {
	switch {
	case c.rangeKey != "":
		return c.rangeKey
	case c.what == "data.label":
		return "column"
	}
	return "columns"
}

// labelShape checks the label's column spec against its dtype: class ids
// are one column, float targets one column or a range.
func (d *decoder) labelShape(c *Column) {
	if c == nil || c.Float || c.rangeKey != "columns" {
		return
	}
	d.errs = append(d.errs, Errorf(c.rangePos, "data.label reads int32 class ids from one column; give column: N, or add dtype: float32 to read float targets from a columns range (regression with several outputs)"))
}

// headerNames reads the column names of a data file with header: true,
// its first non-blank line, and that line's number.
func headerNames(file string, delim byte) ([]string, int, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<26)
	for row := 1; sc.Scan(); row++ {
		line := TrimField(sc.Text(), delim)
		if line == "" {
			continue
		}
		names := strings.Split(line, string(delim))
		for i, n := range names {
			names[i] = strings.Trim(TrimField(n, delim), `"`)
		}
		return names, row, nil
	}
	if err := sc.Err(); err != nil {
		return nil, 0, err
	}
	return nil, 0, fmt.Errorf("the file is empty, but data.header says its first line names the columns")
}

// resolveNames turns the column names of features, label and ids into
// column ranges, from the header line of the CSV. A range by names lists
// consecutive columns, in file order.
func (d *decoder) resolveNames(data *Data) {
	var header []string
	var line int
	for _, c := range data.Columns() {
		if c.names == nil {
			continue
		}
		if !data.Header {
			d.errs = append(d.errs, Errorf(c.rangePos, "%s.%s names columns, but the file has no header line to find them in; add header: true to data (the first line then names the columns), or give column numbers (counting from 0)", c.what, c.rangeKey))
			continue
		}
		if header == nil {
			var err error
			if header, line, err = headerNames(data.CSV, data.Delimiter); err != nil {
				d.errs = append(d.errs, Errorf(data.Pos, "%s: %v", data.CSV, errText(err)))
				return
			}
		}
		at := make([]int, len(c.names))
		ok := true
		for i, name := range c.names {
			at[i] = slices.Index(header, name)
			if at[i] < 0 {
				d.errs = append(d.errs, Errorf(c.rangePos, "%s.%s: %s has no column %q in its header (line %d)%s; its columns are %s", c.what, c.rangeKey, data.CSV, name, line, suggest(name, header), strings.Join(header, ", ")))
				ok = false
			} else if i > 0 && ok && at[i] != at[i-1]+1 {
				d.errs = append(d.errs, Errorf(c.rangePos, "%s.%s: %q (column %d) does not follow %q (column %d) in the header of %s; a data variable reads consecutive columns: list them in file order, or reorder the file", c.what, c.rangeKey, name, at[i], c.names[i-1], at[i-1], data.CSV))
				ok = false
			}
		}
		if ok {
			c.Lo, c.Hi = at[0], at[len(at)-1]+1
		}
	}
}

// TrimField removes the white space (space, tab, CR, LF, VT, FF) around a
// data line or field, except the delimiter itself: with delimiter tab, a
// line's trailing tab separates an empty last field.
func TrimField[T string | []byte](s T, delim byte) T {
	i, j := 0, len(s)
	for i < j && isDataSpace(s[i], delim) {
		i++
	}
	for j > i && isDataSpace(s[j-1], delim) {
		j--
	}
	return s[i:j]
}

func isDataSpace(b, delim byte) bool {
	return b != delim && (b == ' ' || b == '\t' || b == '\r' || b == '\n' || b == '\v' || b == '\f')
}

// intList formats integers as YAML writes them: [3, -1].
func intList(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func errText(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

func (d *decoder) synthetic(n *yaml.Node) *Synthetic {
	s := &Synthetic{Seed: 1}
	d.fields(n, "data.synthetic", []string{"rows", "features", "classes", "seed"}, func(key string, k, v *yaml.Node) {
		x, ok := d.integer(v, "data.synthetic."+key)
		if !ok {
			return
		}
		if x <= 0 && key != "seed" {
			d.errorf(v, "data.synthetic.%s must be positive, got %d", key, x)
		}
		switch key {
		case "rows":
			s.Rows = x
		case "features":
			s.Features = x
		case "classes":
			s.Classes = x
		case "seed":
			s.Seed = uint64(x)
		}
	})
	if s.Rows == 0 || s.Features == 0 || s.Classes == 0 {
		d.errorf(n, "data.synthetic needs rows, features and classes (all positive)")
	} else if s.Rows > 0 && s.Features > 0 && (s.Features > MaxElements || s.Rows > MaxElements/s.Features) {
		d.errorf(n, "data.synthetic rows x features is more than %d elements; make it smaller", MaxElements)
	}
	return s
}

var (
	featureKeys = []string{"name", "columns", "fill", "transform"}
	labelKeys   = []string{"name", "column", "columns", "dtype"}
	idKeys      = []string{"name", "column", "columns", "fill", "hash_buckets", "key", "shared_space", "num_ids", "separator", "max_len"}
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
type columnNodes struct{ hash, shared, num, maxLen, key, fill *yaml.Node }

// columnRange decodes a column spec's name and columns (false: key is
// another one).
func (d *decoder) columnRange(c *Column, what, key string, v *yaml.Node) bool {
	switch key {
	case "name":
		c.Name, _ = d.str(v, what+".name")
	case "column":
		c.rangePos, c.rangeKey = d.pos(v), key
		if v.Kind == yaml.ScalarNode && v.Tag == "!!str" { // a header name
			c.names = []string{v.Value}
		} else if x, ok := d.integer(v, what+".column"); ok {
			if x < 0 {
				d.errorf(v, "%s.column must be >= 0, got %d", what, x)
			}
			c.Lo, c.Hi = x, x+1
		}
	case "columns":
		c.rangePos, c.rangeKey = d.pos(v), key
		if names := stringItems(v); names != nil { // header names
			c.names = names
		} else if r, ok := d.ints(v, what+".columns"); ok {
			if len(r) != 2 || r[0] < 0 || r[1] <= r[0] {
				d.errorf(v, "%s.columns must be a half-open range [first, end) with 0 <= first < end, e.g. [0, 64], got %s", what, intList(r))
			} else {
				c.Lo, c.Hi = r[0], r[1]
			}
		}
	default:
		return false
	}
	return true
}

// columnField decodes the other keys of a column spec.
func (d *decoder) columnField(c *Column, at *columnNodes, what string, allowed []string, key string, k, v *yaml.Node) {
	switch key {
	case "dtype":
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
				d.errorf(v, "%s.key %q is not hash64 (each field's bytes hashed to a 64-bit key) or int64 (each field an integer, taken as it is)%s", what, s, suggest(s, KeyNames))
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
	hashed := at.hash != nil || c.KeyType == KeyHash64
	switch {
	case at.hash != nil && c.Fill != nil:
		d.errs = append(d.errs, Errorf(c.fillPos, "%s.fill does not apply with hash_buckets: an empty field is hashed as a value of its own; remove fill", what))
	case c.KeyType == KeyHash64 && c.Fill != nil:
		d.errs = append(d.errs, Errorf(c.fillPos, "%s.fill does not apply with key: hash64: an empty field is hashed as a value of its own; remove fill", what))
	case c.Fill != nil && c.KeyType == KeyInt64 && c.FillKey == ir.PadKey:
		d.errorf(at.fill, "%s.fill %d is the padding key of int64 keys (-2^63); choose another key", what, c.FillKey)
	case c.Fill != nil && c.KeyType == "" && at.hash == nil && (c.FillKey < 0 || c.FillKey > math.MaxInt32):
		d.errorf(at.fill, "%s.fill must be an id in [0, %d], got %d", what, math.MaxInt32, c.FillKey)
	}
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
		case c.rangeKey == "columns" && (len(c.names) > 1 || c.names == nil && c.Hi-c.Lo != 1):
			d.errs = append(d.errs, Errorf(c.rangePos, "%s.separator reads one multi-valued column, but %s.columns names several; give column: N, or one spec per column", what, what))
		}
		if c.Fill != nil {
			d.errs = append(d.errs, Errorf(c.fillPos, "%s.fill does not apply with separator: an empty field holds no ids (all padding); remove fill", what))
		}
	} else if at.maxLen != nil {
		d.errorf(at.maxLen, "%s.max_len applies to a multi-valued column; add separator: \"|\" (the character between a field's ids) or remove max_len", what)
	}
}

var transformNames = []string{"none", "log"}

// stringItems returns the entries of a list of strings (column names),
// nil when n is not a non-empty list of YAML strings.
func stringItems(n *yaml.Node) []string {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for _, it := range n.Content {
		if it.Kind != yaml.ScalarNode || it.Tag != "!!str" {
			return nil
		}
		out = append(out, it.Value)
	}
	return out
}

// delimiter decodes data.delimiter: one character, or the words tab and
// comma. A YAML plain scalar \t (backslash, t) also means tab, since YAML
// expands the escape only inside double quotes.
func (d *decoder) delimiter(n *yaml.Node) (byte, bool) {
	s, ok := d.str(n, "data.delimiter")
	if !ok {
		return 0, false
	}
	switch s {
	case "tab", `\t`:
		return '\t', true
	case "comma":
		return ',', true
	}
	if len(s) != 1 || s[0] == '\n' || s[0] == '\r' || s[0] == '"' || s[0] >= 0x80 {
		d.errorf(n, "data.delimiter must be one ASCII character other than a newline or a quote, or the word tab or comma; got %q", s)
		return 0, false
	}
	return s[0], true
}
