package dsl

// The data section's column names: a file's header, and a spec's names and ranges resolved against it.

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/internal/csvrow"
	"github.com/psgraph/psgraph/internal/parquetschema"
)

// headerNames reads the column names of a data file with header: true,
// its first non-blank record, and that record's line.
func headerNames(file string, delim byte) ([]string, int, error) {
	names, line, err := csvrow.Header(file, delim)
	if err == io.EOF {
		return nil, 0, fmt.Errorf("the file is empty, but data.header says its first line names the columns")
	}
	if qe, ok := err.(*csvrow.Error); ok {
		return nil, 0, fmt.Errorf("%s:%s", file, qe.At(line))
	}
	return names, line, err
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
