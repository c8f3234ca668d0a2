package dsl

// The data section's file formats (tfrecord, parquet) and the mappings of
// a column's values: label positive/threshold, vocabularies.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// The formats of a data file other than delimited text (Data.Format).
const (
	FormatTFRecord = "tfrecord"
	FormatParquet  = "parquet"
)

// binarySource decodes data.tfrecord or data.parquet: the path of a file
// of that format.
func (d *decoder) binarySource(data *Data, at *dataNodes, dir, key string, k, v *yaml.Node) {
	if at.format != nil || at.csv != nil {
		other := "csv"
		if at.format != nil {
			other = at.format.Value
		}
		d.errorf(k, "data has both %s and %s; keep one source", other, key)
		return
	}
	at.format, at.csv = k, v
	s, ok := d.str(v, "data."+key)
	if !ok {
		return
	}
	if !filepath.IsAbs(s) {
		s = filepath.Join(dir, s)
	}
	if st, err := os.Stat(s); err != nil {
		d.errorf(v, "data.%s: %s cannot be read: %v", key, s, errText(err))
	} else if st.IsDir() {
		d.errorf(v, "data.%s: %s is a directory; give one %s file", key, s, key)
	}
	data.CSV, data.Format = s, key
}

// checkFormat refuses the keys of delimited text with another format.
func (d *decoder) checkFormat(data *Data, at *dataNodes) {
	if data.Format != "" {
		d.checkBinary(data, at)
	}
	if data.Online != nil && data.BuildsVocab() {
		for _, c := range data.Columns() {
			if c.Vocab != nil && c.Vocab.File == "" {
				d.errs = append(d.errs, Errorf(c.Vocab.Pos, "%s.vocab is built from the training rows, and an online source has no rows to read first: give vocab: FILE (one value a line), or hash_buckets", c.what))
			}
		}
	}
	for _, c := range data.IDs {
		if data.Format == "" && c.MaxLen > 0 && c.Separator == 0 {
			d.errs = append(d.errs, Errorf(c.maxLenPos, "%s.max_len applies to a multi-valued column; add separator: \"|\" (the character between a field's ids) or remove max_len", c.what))
		}
	}
}

// checkBinary refuses the keys of delimited text with a tfrecord or
// parquet file.
func (d *decoder) checkBinary(data *Data, at *dataNodes) {
	for _, c := range []struct {
		node *yaml.Node
		what string
	}{{at.delim, "data.delimiter"}, {at.header, "data.header"}} {
		if c.node != nil {
			d.errorf(c.node, "%s is for delimited text; a %s file's columns are named by the file: remove it", c.what, data.Format)
		}
	}
	if data.Online != nil {
		d.errorf(at.format, "data.%s is read whole or streamed in epochs; follow and the other online keys take csv (a file, a directory or standard input) or kafka", data.Format)
	}
}

// firstDuplicate is the first name given twice ("" when none is).
func firstDuplicate(names []string) string {
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			return n
		}
		seen[n] = true
	}
	return ""
}

// vocab decodes a column spec's vocab: a file (vocab: FILE, or vocab:
// {file, oov_buckets}) or one built from the training rows (vocab:
// {min_count, max_size, oov_buckets}).
func (d *decoder) vocab(v *yaml.Node, what string, oov int) *Vocab {
	voc := &Vocab{Pos: d.pos(v), MinCount: 1, OOV: oov}
	if v.Kind == yaml.ScalarNode {
		if s, ok := d.str(v, what+".vocab"); ok {
			voc.File = d.path(s)
		}
		return voc
	}
	var fileNode, builtNode *yaml.Node
	d.fields(v, what+".vocab", []string{"file", "min_count", "max_size", "oov_buckets"}, func(key string, k, n *yaml.Node) {
		switch key {
		case "file":
			fileNode = k
			if s, ok := d.str(n, what+".vocab.file"); ok {
				voc.File = d.path(s)
			}
		case "min_count":
			builtNode = k
			voc.MinCount = d.positive(n, what+".vocab.min_count", "the fewest times a value is seen in the training rows to be in the vocabulary")
		case "max_size":
			builtNode = k
			voc.MaxSize = d.positive(n, what+".vocab.max_size", "the most values the vocabulary holds, the most frequent first")
		case "oov_buckets":
			if x, ok := d.integer(n, what+".vocab.oov_buckets"); ok {
				if x < 0 {
					d.errorf(n, "%s.vocab.oov_buckets must be >= 0 (0: a value not in the vocabulary is an error), got %d", what, x)
				}
				voc.OOV = x
			}
		}
	})
	if fileNode != nil && builtNode != nil {
		d.errorf(builtNode, "%s.vocab has a file (line %d) and %s, which builds one from the training rows; keep one of them", what, fileNode.Line, builtNode.Value)
	}
	return voc
}

// path resolves a path of the model file: relative to its directory.
func (d *decoder) path(s string) string {
	if filepath.IsAbs(s) {
		return s
	}
	return filepath.Join(d.dataDir, s)
}

// loadVocabs reads the vocabularies of files, one value a line.
func (d *decoder) loadVocabs(data *Data) {
	for _, c := range data.Columns() {
		v := c.Vocab
		if v == nil || v.File == "" {
			continue
		}
		words, err := readVocab(v.File)
		if err != nil {
			d.errs = append(d.errs, Errorf(v.Pos, "%s.vocab: %s: %s", c.what, v.File, errText(err)))
			continue
		}
		v.Words = words
	}
}

// readVocab reads a vocabulary file: one value a line, its line's place
// (from 0) its id; a line's surrounding spaces are not part of it, and an
// empty line or a value given twice is an error.
func readVocab(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	var words []string
	seen := map[string]int{}
	for line := 1; sc.Scan(); line++ {
		w := strings.TrimSpace(sc.Text())
		if w == "" {
			return nil, fmt.Errorf("line %d is empty; a vocabulary file holds one value a line", line)
		}
		if at, dup := seen[w]; dup {
			return nil, fmt.Errorf("line %d: %q is also on line %d; every value once", line, w, at)
		}
		seen[w] = line
		words = append(words, w)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("the file is empty; a vocabulary file holds one value a line")
	}
	return words, nil
}

// checkMapping refuses mappings of a column spec that do not go together.
func (d *decoder) checkMapping(c *Column, at *columnNodes, what string) {
	var given []*yaml.Node
	for _, n := range []*yaml.Node{at.positive, at.threshold, at.vocab} {
		if n != nil {
			given = append(given, n)
		}
	}
	if what == "data.label" && len(given) > 1 {
		d.errorf(given[1], "data.label has %s (line %d) and %s; give one mapping of the label's values", given[0].Value, given[0].Line, given[1].Value)
	}
	if what == "data.label" && at.vocab != nil && c.Float {
		d.errorf(at.dtype, "data.label with a vocab reads class ids (int32, one per value of the vocabulary); remove dtype: float32")
	}
	if c.Vocab == nil || what == "data.label" {
		return
	}
	c.Vocab.Shared = c.SharedSpace
	for _, x := range []struct {
		n    *yaml.Node
		hint string
	}{
		{at.hash, "hash_buckets hashes every value; a vocabulary gives known values their own ids and hashes the others into oov_buckets"},
		{at.key, "a vocabulary gives int32 ids of a table's rows; 64-bit keys are for dynamic tables"},
		{at.num, "the ids of a vocabulary are in [0, its size + oov_buckets) already"},
		{at.fill, "an empty field is a value of its own (in the vocabulary or out of it)"},
	} {
		if x.n != nil {
			d.errorf(x.n, "%s.%s does not go with vocab: %s; remove it", what, x.n.Value, x.hint)
		}
	}
	if c.Vocab.File != "" && c.SharedSpace {
		d.errorf(at.shared, "%s.shared_space: a vocabulary file is one id space for all the spec's columns already; remove it", what)
	}
}

// text is a column as written: a name, a number or a range.
func (r colRef) text() string {
	t := YAMLString(r.name)
	if r.num >= 0 {
		t = strconv.Itoa(r.num)
	}
	if r.to != nil {
		t = YAMLString(strings.TrimPrefix(strings.TrimSuffix(t, `"`), `"`) + ".." + strings.Trim(r.to.text(), `"`))
	}
	return t
}

// colsText is the spec's columns as its key writes them: column: X, or
// columns: [...].
func (c *Column) colsText() string {
	if len(c.refs) == 1 && c.refs[0].to == nil {
		return "column: " + c.refs[0].text()
	}
	parts := make([]string, 0, len(c.refs))
	for _, r := range c.refs {
		parts = append(parts, r.text())
	}
	if len(c.refs) == 0 {
		for _, x := range c.Cols {
			parts = append(parts, strconv.Itoa(x))
		}
		if len(parts) == 1 {
			return "column: " + parts[0]
		}
	}
	return "columns: [" + strings.Join(parts, ", ") + "]"
}

// colsList writes file columns as a columns value that reads them back:
// runs of consecutive columns as ranges A..B, never a list of exactly two
// numbers (which would be a half-open range).
func colsList(cols []int) string {
	var parts []string
	for i := 0; i < len(cols); {
		j := i
		for j+1 < len(cols) && cols[j+1] == cols[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d..%d", cols[i], cols[j]))
		} else {
			parts = append(parts, strconv.Itoa(cols[i]))
		}
		i = j + 1
	}
	if len(parts) == 2 && !strings.Contains(parts[1], "..") && !strings.Contains(parts[0], "..") {
		parts[1] += ".." + parts[1]
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// writeMapping writes a column spec's label mapping or vocabulary.
func writeMapping(b *bytes.Buffer, g *Graph, c *Column) {
	if c.Positive != nil {
		b.WriteString(", positive: " + stringList(c.Positive))
	}
	if c.Threshold != nil {
		b.WriteString(", threshold: " + formatFloat(*c.Threshold))
	}
	if v := c.Vocab; v != nil {
		if v.File != "" {
			fmt.Fprintf(b, ", vocab: {file: %s, oov_buckets: %d}", YAMLString(RelPath(filepath.Dir(g.File), v.File)), v.OOV)
		} else {
			fmt.Fprintf(b, ", vocab: {min_count: %d", v.MinCount)
			if v.MaxSize > 0 {
				fmt.Fprintf(b, ", max_size: %d", v.MaxSize)
			}
			fmt.Fprintf(b, ", oov_buckets: %d}", v.OOV)
		}
	}
}

// BuildsVocab says whether a spec of the data builds its vocabulary from
// the training rows (vocab without a file).
func (d *Data) BuildsVocab() bool {
	if d == nil {
		return false
	}
	for _, c := range d.Columns() {
		if c.Vocab != nil && c.Vocab.File == "" {
			return true
		}
	}
	return false
}
