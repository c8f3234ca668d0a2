package dsl

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
)

// SchemaVersion is the DSL version this psgraph reads and writes.
const SchemaVersion = 1

var topKeys = []string{"psgraph", "name", "data", "params", "state", "ops", "assign", "train"}

// Parse reads a model's YAML into a Graph without expanding or checking it.
// Relative data paths are resolved against the directory of file.
func Parse(file string, src []byte) (*Graph, error) {
	doc, err := parseYAML(src)
	if err != nil {
		if err == io.EOF {
			return nil, Errorf(Pos{File: file, Line: 1, Col: 1}, "the file is empty; a model starts with `psgraph: %d`", SchemaVersion)
		}
		return nil, yamlError(file, err)
	}
	d := &decoder{file: file}
	g := &Graph{File: file, Vars: map[string]*Var{}}
	if len(doc.Content) == 0 {
		return nil, Errorf(Pos{File: file, Line: 1, Col: 1}, "the file is empty; a model starts with `psgraph: %d`", SchemaVersion)
	}
	root := doc.Content[0]
	var version *yaml.Node
	var opsNode, assignNode *yaml.Node
	d.fields(root, "the model", topKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "psgraph":
			version = v
			if n, ok := d.integer(v, "psgraph (the schema version)"); ok && n != SchemaVersion {
				d.errorf(v, "schema version %d is not supported; this psgraph reads version %d", n, SchemaVersion)
			}
		case "name":
			g.Name, _ = d.str(v, "name")
		case "data":
			g.Data = d.data(v, filepath.Dir(file), g)
		case "params":
			d.vars(v, "params", KindParam, g)
		case "state":
			d.vars(v, "state", KindState, g)
		case "ops":
			opsNode = v
		case "assign":
			assignNode = v
		case "train":
			g.Train = d.train(v)
		}
	})
	d.checkEvalEvery(g)
	d.checkOnlineTrain(g)
	if root.Kind == yaml.MappingNode && version == nil {
		d.errorf(root, "missing `psgraph: %d` (the schema version) at the top of the model", SchemaVersion)
	}
	if opsNode != nil {
		g.Ops = d.ops(opsNode, "ops", false)
	}
	if assignNode != nil {
		g.Assigns = d.assigns(assignNode)
	}
	if g.Name == "" {
		g.Name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	}
	return g, d.errs.Err()
}

func yamlError(file string, err error) error {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "yaml: ")
	// yaml.v3 reports "line N: message".
	if strings.HasPrefix(msg, "line ") {
		rest := msg[5:]
		if i := strings.Index(rest, ":"); i > 0 {
			if n, e := strconv.Atoi(rest[:i]); e == nil {
				return Errorf(Pos{File: file, Line: n, Col: 1}, "invalid YAML: %s", strings.TrimSpace(rest[i+1:]))
			}
		}
	}
	return Errorf(Pos{File: file, Line: 1, Col: 1}, "invalid YAML: %s", msg)
}

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

var (
	varKeys   = []string{"shape", "init", "dtype", "place", "of", "block"}
	paramKeys = append(append([]string{}, varKeys...), "optimizer", "dynamic")
)

func (d *decoder) vars(n *yaml.Node, section string, kind VarKind, g *Graph) {
	keys := varKeys
	if kind == KindParam || kind == KindState {
		keys = paramKeys
	}
	d.fields(n, section, nil, func(name string, k, v *yaml.Node) {
		vr := &Var{Name: name, Kind: kind, DType: ir.F32, Pos: d.pos(k)}
		what := section + "." + name
		hasShape := false
		d.fields(v, what, keys, func(key string, kk, vv *yaml.Node) {
			switch key {
			case "optimizer":
				if kind != KindParam {
					d.errorf(kk, "%s: a state variable is not trained, so it takes no optimizer; declare %s under params to train it", what, name)
					return
				}
				vr.Optimizer = d.optimizer(vv)
			case "dynamic":
				if kind != KindParam {
					d.errorf(kk, "%s: only a parameter can be a dynamic table; declare %s under params", what, name)
					return
				}
				hasShape = true
				vr.Dynamic = d.dynamic(vv, what+".dynamic")
			case "shape":
				hasShape = true
				if s, ok := d.ints(vv, what+".shape"); ok {
					for _, x := range s {
						if x <= 0 {
							d.errorf(vv, "%s.shape %v must have positive dimensions (only data variables have the -1 batch dimension)", what, intList(s))
							break
						}
					}
					vr.Shape = s
				}
			case "init":
				vr.Init = d.init(vv, what+".init")
			case "dtype":
				if s, ok := d.str(vv, what+".dtype"); ok {
					dt, ok := ir.ParseDType(s)
					if !ok {
						d.errorf(vv, "%s.dtype %q is not float32, int32 or int64", what, s)
					}
					vr.DType = dt
				}
			case "place":
				vr.Place = d.place(vv, what)
			case "of":
				vr.Of, _ = d.str(vv, what+".of")
			case "block":
				vr.Block = d.block(vv, what+".block")
			}
		})
		if b := vr.Block; b != nil && vr.Shape != nil {
			want := append(ir.Shape{b.Rows()}, b.Shape[1:]...)
			if !vr.Shape.Equal(want) {
				d.errorf(v, "%s.shape %v does not match its block: rows [%d, %d) (stride %d) of %s %v have shape %v", what, vr.Shape, b.Start, b.End, b.Step(), b.Of, b.Shape, want)
			}
		}
		if !hasShape && v.Kind == yaml.MappingNode {
			d.errorf(v, "%s needs a shape, e.g. shape: [64, 128]", what)
		}
		if kind == KindParam && vr.DType != ir.F32 {
			d.errorf(v, "%s: parameters are float32", what)
		}
		if vr.Init == nil {
			vr.Init = &Init{Type: "zeros", Pos: vr.Pos}
		}
		if vr.Dynamic != nil {
			d.checkDynamicVar(vr, v, what)
		}
		d.declare(g, vr)
	})
}

// block parses `block: {of: W, rows: [start, end], shape: [full shape]}`.
func (d *decoder) block(n *yaml.Node, what string) *Block {
	b := &Block{Pos: d.pos(n)}
	var rowsNode, shapeNode *yaml.Node
	if !d.fields(n, what, []string{"of", "rows", "stride", "shape"}, func(key string, k, v *yaml.Node) {
		switch key {
		case "stride":
			if st, ok := d.integer(v, what+".stride"); ok {
				if st < 1 {
					d.errorf(v, "%s.stride must be at least 1 (every stride-th row of rows), got %d", what, st)
				}
				b.Stride = st
			}
		case "of":
			b.Of, _ = d.str(v, what+".of")
		case "rows":
			rowsNode = v
			if r, ok := d.ints(v, what+".rows"); ok {
				if len(r) != 2 || r[0] < 0 || r[1] <= r[0] {
					d.errorf(v, "%s.rows must be a half-open range [start, end) with 0 <= start < end, got %v", what, r)
				} else {
					b.Start, b.End = r[0], r[1]
				}
			}
		case "shape":
			shapeNode = v
			if s, ok := d.ints(v, what+".shape"); ok {
				b.Shape = s
			}
		}
	}) {
		return nil
	}
	switch {
	case b.Of == "":
		d.errorf(n, "%s needs of: the whole variable the block is cut from", what)
	case rowsNode == nil:
		d.errorf(n, "%s needs rows: [start, end)", what)
	case shapeNode == nil:
		d.errorf(n, "%s needs shape: the whole variable's shape", what)
	case len(b.Shape) == 0 || b.End > b.Shape[0]:
		d.errorf(shapeNode, "%s: rows [%d, %d) do not fit in dim 0 of shape %v", what, b.Start, b.End, b.Shape)
	default:
		return b
	}
	return nil
}

func (d *decoder) declare(g *Graph, v *Var) {
	if old, dup := g.Vars[v.Name]; dup {
		d.errs = append(d.errs, Errorf(v.Pos, "%q is declared twice (first as %s at %s); data, params and state share one namespace, so rename one", v.Name, old.Kind, old.Pos))
		return
	}
	g.AddVar(v)
}

func (d *decoder) place(n *yaml.Node, what string) string {
	s, ok := d.str(n, what+".place")
	if !ok {
		return ""
	}
	if err := CheckPlace(s); err != "" {
		d.errorf(n, "%s.place: %s", what, err)
	}
	return s
}

// CheckPlace validates a placement string; it returns "" when valid.
func CheckPlace(s string) string {
	if s == "trainer" || s == "pserver" {
		return ""
	}
	if rest, ok := strings.CutPrefix(s, "pserver:"); ok {
		if i, err := strconv.Atoi(rest); err == nil && i >= 0 {
			return ""
		}
	}
	return strconv.Quote(s) + " is not trainer, pserver or pserver:<index>"
}

// Initializers and their attributes.
var initAttrs = map[string][]ops.AttrSpec{
	"zeros":          {},
	"constant":       {{Name: "value", Kind: ops.AttrFloat, Required: true}},
	"uniform":        {{Name: "min", Kind: ops.AttrFloat, Default: -0.05}, {Name: "max", Kind: ops.AttrFloat, Default: 0.05}, seedAttr},
	"normal":         {{Name: "mean", Kind: ops.AttrFloat, Default: 0.0}, {Name: "std", Kind: ops.AttrFloat, Default: 0.01}, seedAttr},
	"he_normal":      {seedAttr},
	"xavier_uniform": {seedAttr},
}

var seedAttr = ops.AttrSpec{Name: "seed", Kind: ops.AttrInt}

// InitNames lists the initializers.
func InitNames() []string {
	out := make([]string, 0, len(initAttrs))
	for k := range initAttrs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (d *decoder) init(n *yaml.Node, what string) *Init {
	return d.initWith(n, what, nil)
}

// initWith parses an initializer whose attributes may be expressions over
// hyper (an optimizer state's init: {type: constant, value: $name}).
func (d *decoder) initWith(n *yaml.Node, what string, hyper map[string]float64) *Init {
	in := &Init{Pos: d.pos(n), Attrs: ops.Attrs{}}
	if n.Kind == yaml.ScalarNode { // shorthand: init: zeros
		in.Type = n.Value
		if _, ok := initAttrs[in.Type]; !ok {
			d.errorf(n, "unknown initializer %q%s; known: %s", in.Type, suggest(in.Type, InitNames()), strings.Join(InitNames(), ", "))
		}
		d.fillDefaults(n, in.Attrs, initAttrs[in.Type], what)
		return in
	}
	raw := map[string]*yaml.Node{}
	var typeNode *yaml.Node
	d.fields(n, what, nil, func(key string, k, v *yaml.Node) {
		if key == "type" {
			typeNode = v
			in.Type, _ = d.str(v, what+".type")
			return
		}
		raw[key] = v
	})
	if typeNode == nil {
		d.errorf(n, "%s needs a type (%s)", what, strings.Join(InitNames(), ", "))
		return in
	}
	specs, ok := initAttrs[in.Type]
	if !ok {
		d.errorf(typeNode, "unknown initializer %q%s; known: %s", in.Type, suggest(in.Type, InitNames()), strings.Join(InitNames(), ", "))
		return in
	}
	in.Attrs = d.attrs(n, raw, specs, what, hyper)
	if in.Type == "uniform" && in.Attrs.Float("min") > in.Attrs.Float("max") {
		d.errorf(n, "%s: min %g is greater than max %g", what, in.Attrs.Float("min"), in.Attrs.Float("max"))
	}
	if in.Type == "normal" && in.Attrs.Float("std") < 0 {
		d.errorf(n, "%s: std must be >= 0", what)
	}
	return in
}

func (d *decoder) fillDefaults(n *yaml.Node, a ops.Attrs, specs []ops.AttrSpec, what string) {
	for _, s := range specs {
		if _, ok := a[s.Name]; ok {
			continue
		}
		if s.Required {
			d.errorf(n, "%s needs attribute %q (%s)", what, s.Name, s.Kind)
		} else if s.Default != nil {
			a[s.Name] = s.Default
		}
	}
}

// attrs converts raw attribute nodes against their specs. Values may be
// expressions over hyper-parameters ("$lr", "1 - $beta1") when hyper is set.
func (d *decoder) attrs(at *yaml.Node, raw map[string]*yaml.Node, specs []ops.AttrSpec, what string, hyper map[string]float64) ops.Attrs {
	a := ops.Attrs{}
	// In file order, so that several errors come in the same order every
	// time (TestAttrErrorsInFileOrder).
	var buf [8]string
	keys := buf[:0]
	for key := range raw {
		keys = append(keys, key)
	}
	if len(keys) > 1 {
		slices.SortFunc(keys, func(x, y string) int {
			a, b := raw[x], raw[y]
			if a.Line != b.Line {
				return a.Line - b.Line
			}
			return a.Column - b.Column
		})
	}
	for _, key := range keys {
		v := raw[key]
		var spec *ops.AttrSpec
		for i := range specs {
			if specs[i].Name == key {
				spec = &specs[i]
			}
		}
		if spec == nil {
			names := make([]string, len(specs))
			for i, s := range specs {
				names[i] = s.Name
			}
			if len(names) == 0 {
				d.errorf(v, "%s takes no attributes, got %q", what, key)
			} else {
				d.errorf(v, "unknown attribute %q for %s%s; allowed: %s", key, what, suggestAttr(key, names), strings.Join(names, ", "))
			}
			continue
		}
		aw := what + " attribute " + key
		if hyper != nil && v.Kind == yaml.ScalarNode && strings.Contains(v.Value, "$") {
			f, err := evalExpr(v.Value, hyper)
			if err != nil {
				d.errorf(v, "%s: %v", aw, err)
				continue
			}
			switch spec.Kind {
			case ops.AttrFloat:
				a[key] = f
			case ops.AttrInt:
				a[key] = int(f)
			default:
				d.errorf(v, "%s is a %s; hyper-parameters are numbers", aw, spec.Kind)
			}
			continue
		}
		switch spec.Kind {
		case ops.AttrFloat:
			if f, ok := d.number(v, aw); ok {
				a[key] = f
			}
		case ops.AttrInt:
			if x, ok := d.integer(v, aw); ok {
				a[key] = x
			}
		case ops.AttrBool:
			if b, ok := d.boolean(v, aw); ok {
				a[key] = b
			}
		case ops.AttrString:
			if s, ok := d.str(v, aw); ok {
				a[key] = s
			}
		case ops.AttrInts:
			if xs, ok := d.ints(v, aw); ok {
				a[key] = xs
			}
		}
	}
	d.fillDefaults(at, a, specs, what)
	return a
}

var opKeys = []string{"type", "inputs", "outputs", "attrs", "section", "place", "param"}

// ops parses an op list. In a template, attribute values may reference
// hyper-parameters; they are kept raw and converted at expansion.
func (d *decoder) ops(n *yaml.Node, what string, template bool) []*Op {
	items, ok := d.list(n, what)
	if !ok {
		return nil
	}
	// The entries are decoded in parts on every core, each part with a
	// decoder of its own; the ops and errors are joined in file order.
	parts := min(runtime.GOMAXPROCS(0), len(items)/minOpsPart)
	if parts <= 1 {
		return d.opItems(items, 0, what, template)
	}
	outs := make([][]*Op, parts)
	decs := make([]decoder, parts)
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := p*len(items)/parts, (p+1)*len(items)/parts
		decs[p].file = d.file
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[p] = decs[p].opItems(items[lo:hi], lo, what, template)
		}()
	}
	wg.Wait()
	for p := range parts {
		d.errs = append(d.errs, decs[p].errs...)
	}
	return slices.Concat(outs...)
}

// minOpsPart is the fewest op entries decoded on a core of their own.
const minOpsPart = 2048

// opItems decodes the op entries items, the first being entry first of
// what.
func (d *decoder) opItems(items []*yaml.Node, first int, what string, template bool) []*Op {
	out := make([]*Op, 0, len(items))
	for i, it := range items {
		op := &Op{Pos: d.pos(it)}
		ow := what + "[" + strconv.Itoa(first+i) + "]"
		raw := map[string]*yaml.Node{}
		var attrNode, typeNode *yaml.Node
		if !d.fields(it, "op "+ow, opKeys, func(key string, k, v *yaml.Node) {
			switch key {
			case "type":
				typeNode = v
				op.Type, _ = d.str(v, ow+".type")
			case "inputs":
				op.Inputs, _ = d.strings(v, ow+".inputs")
			case "outputs":
				op.Outputs, _ = d.strings(v, ow+".outputs")
			case "attrs":
				attrNode = v
				d.fields(v, ow+".attrs", nil, func(key string, k, v *yaml.Node) { raw[key] = v })
			case "section":
				if s, ok := d.str(v, ow+".section"); ok {
					sec, ok := ParseSection(s)
					if !ok {
						d.errorf(v, "section %q is not forward, backward or optimize%s", s, suggest(s, sectionNames[:]))
					}
					op.Section = sec
				}
			case "place":
				op.Place = d.place(v, ow)
			case "param":
				op.Param, _ = d.str(v, ow+".param")
			}
		}) {
			continue
		}
		if typeNode == nil {
			d.errorf(it, "op %s needs a type", ow)
			continue
		}
		def, ok := ops.Lookup(op.Type)
		if !ok {
			d.errorf(typeNode, "unknown op %q%s; run `psgraph ops` for the catalog", op.Type, suggest(op.Type, ops.Names()))
			continue
		}
		if attrNode == nil {
			attrNode = it
		}
		if template {
			op.raw = raw
			op.rawAt = attrNode
		} else {
			op.Attrs = d.attrs(attrNode, raw, def.Attrs, "op "+op.Type, nil)
		}
		if len(op.Outputs) == 0 && len(def.Outputs) > 0 {
			d.errorf(it, "op %s (%s) needs outputs: one name for each of %v", ow, op.Type, def.Outputs)
			continue
		}
		out = append(out, op)
	}
	return out
}

func (d *decoder) assigns(n *yaml.Node) []Assign {
	var out []Assign
	d.fields(n, "assign", nil, func(key string, k, v *yaml.Node) {
		if val, ok := d.str(v, "assign."+key); ok {
			out = append(out, Assign{Target: key, Value: val, Pos: d.pos(k)})
		}
	})
	return out
}

var trainKeys = []string{"loss", "metrics", "batch", "steps", "epochs", "optimizer", "eval_every", "clip"}

func (d *decoder) train(n *yaml.Node) *Train {
	t := &Train{Pos: d.pos(n)}
	hasBatch := false
	var stepsNode, epochsNode *yaml.Node
	d.fields(n, "train", trainKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "loss":
			t.Loss, _ = d.str(v, "train.loss")
			t.LossPos = d.pos(v)
		case "metrics":
			t.Metrics, _ = d.strings(v, "train.metrics")
			if v.Kind == yaml.SequenceNode && len(t.Metrics) == len(v.Content) {
				for _, m := range v.Content {
					t.MetricPos = append(t.MetricPos, d.pos(m))
				}
			}
		case "batch":
			hasBatch = true
			if x, ok := d.integer(v, "train.batch"); ok {
				if x <= 0 {
					d.errorf(v, "train.batch must be positive, got %d", x)
				}
				t.Batch = x
			}
		case "epochs":
			epochsNode = k
			if x, ok := d.integer(v, "train.epochs"); ok {
				if x <= 0 {
					d.errorf(v, "train.epochs must be positive, got %d", x)
				}
				t.Epochs = x
			}
		case "steps":
			stepsNode = k
			if x, ok := d.integer(v, "train.steps"); ok {
				if x <= 0 {
					d.errorf(v, "train.steps must be positive, got %d", x)
				}
				t.Steps = x
			}
		case "optimizer":
			t.Optimizer = d.optimizer(v)
		case "eval_every":
			t.evalEveryPos = d.pos(v)
			if x, ok := d.integer(v, "train.eval_every"); ok {
				if x <= 0 {
					d.errorf(v, "train.eval_every must be positive (evaluate the held-out data every N steps), got %d", x)
				}
				t.EvalEvery = x
			}
		case "clip":
			t.Clip = d.clip(v)
		}
	})
	if !hasBatch && n.Kind == yaml.MappingNode {
		d.errorf(n, "train needs batch (the per-trainer batch size)")
	}
	if stepsNode != nil && epochsNode != nil {
		d.errorf(epochsNode, "train has both steps (line %d) and epochs; keep one of them: epochs sets steps = ceil(epochs x rows / (batch x trainers))", stepsNode.Line)
	}
	return t
}

// clip parses train.clip: {value: V} and/or {norm: N}.
func (d *decoder) clip(n *yaml.Node) *Clip {
	c := &Clip{Pos: d.pos(n)}
	d.fields(n, "train.clip", []string{"value", "norm"}, func(key string, k, v *yaml.Node) {
		f, ok := d.number(v, "train.clip."+key)
		if !ok {
			return
		}
		if f <= 0 {
			d.errorf(v, "train.clip.%s must be positive, got %g", key, f)
		}
		if key == "value" {
			c.Value = f
		} else {
			c.Norm = f
		}
	})
	if n.Kind == yaml.MappingNode && c.Value == 0 && c.Norm == 0 && len(n.Content) == 0 {
		d.errorf(n, "train.clip needs value: <V> (each gradient element into [-V, V]) or norm: <N> (the global gradient norm at most N)")
	}
	return c
}
