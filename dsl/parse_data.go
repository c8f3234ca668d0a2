package dsl

// The data section of a model: its file, columns and variables.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/internal/csvrow"
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
