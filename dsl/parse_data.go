package dsl

// The data section of a model: its file, columns and variables.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/internal/csvrow"
	"github.com/psgraph/psgraph/internal/parquetschema"
)

var dataKeys = []string{"csv", "tfrecord", "parquet", "names", "synthetic", "features", "label", "ids", "normalize", "shuffle", "seed", "delimiter", "stream", "header", "eval",
	"kafka", "follow", "on_bad_row", "normalize_rows", "metrics_window"} // the last line: online.go

func (d *decoder) data(n *yaml.Node, dir string, g *Graph) *Data {
	data := &Data{Pos: d.pos(n), Normalize: "none", Seed: 1, Delimiter: ','}
	d.dataDir = dir
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
	d.checkFormat(data, &at)
	if data.Synthetic == nil && len(d.errs) == 0 && d.fileNames(data, &at) {
		d.resolveColumns(data, &at)
	}
	if data.Stream && data.Shuffle {
		d.errorf(at.shuffle, "data.shuffle cannot be used with stream: true: a streamed file is read in file order, and a shuffle over all rows needs them all in memory; shuffle the file once beforehand (e.g. `shuf -o shuffled.tsv train.tsv`) and set shuffle: false, or remove stream to load the file into memory")
	}
	if data.CSV != "" && data.Format == "" && data.Online == nil && len(d.errs) == 0 {
		d.checkCSVWidth(data)
	}
	if len(d.errs) == 0 {
		d.loadVocabs(data)
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
	names, format                                                 *yaml.Node
	online                                                        onlineNodes
}

// dataField decodes one key of the data section.
func (d *decoder) dataField(data *Data, at *dataNodes, dir, key string, k, v *yaml.Node) {
	switch key {
	case "csv":
		d.csvSource(data, at, dir, v)
	case "tfrecord", "parquet":
		d.binarySource(data, at, dir, key, k, v)
	case "names":
		at.names = k
		if names, ok := d.strings(v, "data.names"); ok {
			if dup := firstDuplicate(names); dup != "" {
				d.errorf(v, "data.names names %q twice; every column needs a name of its own", dup)
			}
			data.Names = names
		}
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
		c.Cols = nil
		for j := range data.Synthetic.Features {
			c.Cols = append(c.Cols, j)
		}
	}
	if data.Label != nil {
		data.Label.Cols = []int{data.Synthetic.Features}
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
				v.DType, v.Shape = ir.F32, ir.Shape{-1, len(c.Cols)}
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

// checkCSVWidth compares the columns with the width of the CSV's first
// row, so that a bad column is reported at its YAML node. The data loader
// checks every row when it reads the file.
func (d *decoder) checkCSVWidth(data *Data) {
	f, err := os.Open(data.CSV)
	if err != nil {
		return
	}
	defer f.Close()
	r := csvrow.NewReader(bufio.NewReaderSize(f, 1<<16), data.Delimiter)
	sp := csvrow.Splitter{Delim: data.Delimiter}
	header := data.Header
	for {
		rec, err := r.Next()
		if err != nil {
			return // the reader of the data reports it
		}
		line := csvrow.Trim(rec, data.Delimiter)
		if len(line) == 0 {
			continue
		}
		if header { // the names; resolveColumns checked them
			header = false
			continue
		}
		if sp.Split(line) != nil {
			return
		}
		width := len(sp.Fields)
		hint := ""
		if width == 1 && data.Delimiter != '\t' && bytes.IndexByte(line, '\t') >= 0 {
			hint = " (its lines hold tabs: add delimiter: tab to data)"
		}
		for _, c := range data.Columns() {
			if hi := c.maxCol(); hi >= width {
				d.errs = append(d.errs, Errorf(c.rangePos, "%s.%s reads column %d, but %s has %d columns (0 to %d) in row %d%s; columns count from 0, and two numbers [first, end) are a half-open range", c.what, rangeKey(c), hi, data.CSV, width, width-1, r.Start, hint))
			}
		}
		return
	}
}

// maxCol is the last file column the spec reads (-1: none).
func (c *Column) maxCol() int {
	m := -1
	for _, x := range c.Cols {
		m = max(m, x)
	}
	return m
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
// are one column, float targets one column or several.
func (d *decoder) labelShape(c *Column) {
	if c == nil || c.Float || c.rangeKey != "columns" || len(c.refs) == 1 && c.refs[0].to == nil {
		return
	}
	d.errs = append(d.errs, Errorf(c.rangePos, "data.label reads int32 class ids from one column; give column: N, or add dtype: float32 to read float targets from several columns (regression with several outputs)"))
}

// headerNames reads the column names of a data file with header: true,
// its first non-blank record, and that record's line.
func headerNames(file string, delim byte) ([]string, int, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	r := csvrow.NewReader(bufio.NewReaderSize(f, 1<<16), delim)
	sp := csvrow.Splitter{Delim: delim}
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return nil, 0, fmt.Errorf("the file is empty, but data.header says its first line names the columns")
		}
		if qe, ok := err.(*csvrow.Error); ok {
			return nil, 0, fmt.Errorf("%s:%s", file, qe.At(r.Start))
		}
		if err != nil {
			return nil, 0, err
		}
		line := csvrow.Trim(rec, delim)
		if len(line) == 0 {
			continue
		}
		if err := sp.Split(line); err != nil {
			return nil, 0, fmt.Errorf("%s:%s", file, err.(*csvrow.Error).At(r.Start))
		}
		names := make([]string, len(sp.Fields))
		for i, n := range sp.Fields {
			names[i] = string(n)
		}
		return names, r.Start, nil
	}
}

// fileNames sets data.Names, the names of the file's columns: names:,
// a CSV's header line, a parquet file's columns; for a tfrecord without
// names:, the keys the data section names, in order of first mention.
func (d *decoder) fileNames(data *Data, at *dataNodes) bool {
	switch {
	case data.Names != nil:
		if data.Format == FormatParquet {
			d.errorf(at.names, "data.names does not apply to a parquet file: its columns have names already; give columns by those")
			return false
		}
		if data.Format == "" && data.Online == nil && !data.Header {
			// a name a column: fewer or more would name the wrong ones
			if fields, line, err := headerNames(data.CSV, data.Delimiter); err == nil && len(fields) != len(data.Names) {
				d.errorf(at.names, "data.names gives %d names, and the first row of %s (line %d) has %d fields; give one name a column, in order", len(data.Names), data.CSV, line, len(fields))
				return false
			}
		}
		return true
	case data.Format == FormatParquet:
		names, err := parquetschema.Names(data.CSV)
		if err != nil {
			d.errs = append(d.errs, Errorf(data.Pos, "%s: %v", data.CSV, errText(err)))
			return false
		}
		data.Names = names
	case data.Format == FormatTFRecord:
		for _, c := range data.Columns() {
			var refs []colRef
			for _, r := range c.refs {
				names, ok := keyRange(r)
				if !ok {
					d.errs = append(d.errs, Errorf(c.rangePos, "%s.%s: a tfrecord's features have no positions, only keys: give them by key (columns: [I1, I2]), a range of numbered keys (I1..I13), or list the keys in order with data.names: [...] to give them positions", c.what, c.rangeKey))
					return false
				}
				for _, n := range names {
					if !slices.Contains(data.Names, n) {
						data.Names = append(data.Names, n)
					}
					refs = append(refs, colRef{name: n, num: -1})
				}
			}
			c.refs = refs
		}
	case data.Header && data.Online == nil:
		names, line, err := headerNames(data.CSV, data.Delimiter)
		if err != nil {
			d.errs = append(d.errs, Errorf(data.Pos, "%s: %v", data.CSV, errText(err)))
			return false
		}
		if allNumbers(names) {
			d.errs = append(d.errs, Errorf(d.pos(at.header), "data.header is true, but the first line of %s (line %d) holds only numbers (%s): it is a row, not column names; remove header: true, and give the columns names with names: [...] if you want to use names", data.CSV, line, strings.Join(names[:min(len(names), 4)], ", ")))
			return false
		}
		data.Names, data.headerLine = names, line
	}
	return true
}

// keyRange lists the keys of a tfrecord's column as written: a key, or a
// range of numbered keys with one prefix (I1..I13: I1, I2, ..., I13);
// false for a number or another range.
func keyRange(r colRef) ([]string, bool) {
	if r.num >= 0 {
		return nil, false
	}
	if r.to == nil {
		return []string{r.name}, true
	}
	split := func(s string) (string, int, bool) {
		i := len(s)
		for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
			i--
		}
		n, err := strconv.Atoi(s[i:])
		return s[:i], n, err == nil && i > 0
	}
	p1, a, ok1 := split(r.name)
	p2, b, ok2 := split(r.to.name)
	if !ok1 || !ok2 || p1 != p2 || b < a {
		return nil, false
	}
	var out []string
	for i := a; i <= b; i++ {
		out = append(out, p1+strconv.Itoa(i))
	}
	return out, true
}

// allNumbers says whether every name is a number: a row, not a header.
func allNumbers(names []string) bool {
	for _, n := range names {
		if _, err := strconv.ParseFloat(strings.TrimSpace(n), 64); err != nil {
			return false
		}
	}
	return len(names) > 0
}

// resolveColumns turns the columns of features, label and ids as written
// (names, numbers, ranges) into file columns: names by data.Names.
func (d *decoder) resolveColumns(data *Data, at *dataNodes) {
	for _, c := range data.Columns() {
		if c.refs == nil {
			continue
		}
		if data.Names == nil && data.headerLine == 0 {
			if name := firstName(c.refs); name != "" {
				d.errs = append(d.errs, Errorf(c.rangePos, "%s.%s names column %q, but the file has no names to find it in; add header: true to data (the first line names the columns) or names: [...] (the columns' names, in order), or give column numbers (counting from 0)", c.what, c.rangeKey, name))
				continue
			}
		}
		var cols []int
		ok := true
		for _, r := range c.refs {
			from, good := d.colIndex(data, c, r)
			ok = ok && good
			if !good {
				continue
			}
			if r.to == nil {
				cols = append(cols, from)
				continue
			}
			to, good := d.colIndex(data, c, *r.to)
			if ok = ok && good; !good {
				continue
			}
			if to < from {
				d.errs = append(d.errs, Errorf(c.rangePos, "%s.%s: the range %s..%s runs backwards: %q is column %d of %s and %q column %d; write %s..%s", c.what, c.rangeKey, r.name, r.to.name, r.name, from, data.CSV, r.to.name, to, r.to.name, r.name))
				ok = false
				continue
			}
			for x := from; x <= to; x++ {
				cols = append(cols, x)
			}
		}
		if ok {
			c.Cols = cols
		}
	}
}

// firstName is the first column given by name ("" when none is).
func firstName(refs []colRef) string {
	for _, r := range refs {
		if r.num < 0 {
			return r.name
		}
	}
	return ""
}

// colIndex is the file column of a column as written.
func (d *decoder) colIndex(data *Data, c *Column, r colRef) (int, bool) {
	if r.num >= 0 {
		return r.num, true
	}
	if data.Names == nil && data.headerLine < 0 {
		return 0, false // reported
	}
	if data.Names == nil {
		d.errs = append(d.errs, Errorf(c.rangePos, "%s.%s names column %q, but the file has no names to find it in; add header: true to data (the first line names the columns) or names: [...] (the columns' names, in order), or give column numbers (counting from 0)", c.what, c.rangeKey, r.name))
		return 0, false
	}
	if i := slices.Index(data.Names, r.name); i >= 0 {
		return i, true
	}
	where := "its names"
	if data.headerLine > 0 {
		where = fmt.Sprintf("its header (line %d)", data.headerLine)
	}
	if len(data.Names) == 1 && data.Delimiter != '\t' && strings.Contains(data.Names[0], "\t") {
		d.errs = append(d.errs, Errorf(c.rangePos, "%s.%s: %s has no column %q: %s is one field holding tabs; add delimiter: tab to data", c.what, c.rangeKey, data.CSV, r.name, where))
		data.Names, data.headerLine = nil, -1 // one error, not one per spec
		return 0, false
	}
	shown := data.Names
	if len(shown) > 40 {
		shown = shown[:40]
	}
	d.errs = append(d.errs, Errorf(c.rangePos, "%s.%s: %s has no column %q in %s%s; its columns are %s", c.what, c.rangeKey, data.CSV, r.name, where, suggest(r.name, data.Names), strings.Join(shown, ", ")))
	return 0, false
}

// TrimField removes the white space (space, tab, CR, LF, VT, FF) around a
// data line or field, except the delimiter itself: with delimiter tab, a
// line's trailing tab separates an empty last field.
func TrimField[T string | []byte](s T, delim byte) T { return csvrow.Trim(s, delim) }

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
