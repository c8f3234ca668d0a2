package data

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/internal/csvrow"
	"github.com/psgraph/psgraph/internal/parquetschema"
)

// Other is WithFile for another file of the model's data (held-out,
// evaluation and prediction data). A file with names (a CSV with a
// header line, a parquet file) is matched by them: each column the model
// reads is found by its name, wherever it stands, and columns it does not
// read may be absent or in another order; a hashed column keeps the hash
// space of its column in the model's data file. A file without names is
// read by position. A column the model reads that the file lacks is an
// error naming it; ForPrediction allows the label's.
func Other(spec *dsl.Data, path string) (*dsl.Data, error) { return other(spec, path, false) }

// ForPrediction is Other for rows to predict: the spec without its
// label, which the file need not hold.
func ForPrediction(spec *dsl.Data, path string) (*dsl.Data, error) {
	return other(spec, path, true)
}

func other(spec *dsl.Data, path string, noLabel bool) (*dsl.Data, error) {
	o := WithFile(spec, path)
	if noLabel {
		o.Label = nil
	}
	if f, ok := FormatOf(path); ok && f != spec.Format {
		if spec.Names == nil {
			return nil, fmt.Errorf("%s: a %s file is read by column names, and the model's data (%s) names none: give its columns names (data.names: [...], or a header line and header: true)", path, formatName(f), spec.Pos)
		}
		o.Format = f
		o.Header, o.Delimiter = f == "", 0
		if f == "" && (strings.HasSuffix(path, ".tsv") || strings.HasSuffix(path, ".tsv.gz")) {
			o.Delimiter = '\t'
		}
	} else if path == spec.CSV {
		return o, nil
	}
	if spec.Names == nil || o.Format == dsl.FormatTFRecord || o.Format == "" && !o.Header {
		// a tfrecord's features are found by key, a file without names by position
		return o, nil
	}
	var got []string
	var where string
	var err error
	if o.Format == dsl.FormatParquet {
		got, err = parquetschema.Names(path)
		where = path
	} else {
		var line int
		got, line, err = headerNames(path, o.Delimiter)
		where = fmt.Sprintf("%s:%d", path, line)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if slices.Equal(got, spec.Names) {
		return o, nil
	}
	remap := func(c *dsl.Column) (*dsl.Column, error) {
		cc := *c
		cc.Cols = make([]int, len(c.Cols))
		if cc.HashCols == nil {
			cc.HashCols = c.Cols
		}
		for k, col := range c.Cols {
			name := spec.Names[col]
			at := slices.Index(got, name)
			if at < 0 {
				shown := got[:min(len(got), 40)]
				return nil, fmt.Errorf("%s: the file has no column %q, which %s %q reads (%s); its columns are %s", where, name, c.Key(), c.Name, c.Pos, strings.Join(shown, ", "))
			}
			cc.Cols[k] = at
		}
		return &cc, nil
	}
	var cols []*dsl.Column
	for _, list := range []*[]*dsl.Column{&o.Features, &o.IDs} {
		cols = cols[:0]
		for _, c := range *list {
			cc, err := remap(c)
			if err != nil {
				return nil, err
			}
			cols = append(cols, cc)
		}
		*list = slices.Clone(cols)
	}
	if o.Label != nil {
		if o.Label, err = remap(o.Label); err != nil {
			return nil, err
		}
	}
	o.Names = got
	return o, nil
}

// FormatOf is the format a file's name says it holds: "tfrecord" for
// .tfrecord, .tfrecords and .tfr (gzipped or not), "parquet" for
// .parquet, "" (delimited text) for .csv, .tsv and .txt (gzipped or not);
// false for any other name.
func FormatOf(path string) (string, bool) {
	name := strings.TrimSuffix(strings.ToLower(path), ".gz")
	for _, f := range []struct{ ext, format string }{
		{".tfrecord", dsl.FormatTFRecord}, {".tfrecords", dsl.FormatTFRecord}, {".tfr", dsl.FormatTFRecord},
		{".parquet", dsl.FormatParquet}, {".csv", ""}, {".tsv", ""}, {".txt", ""},
	} {
		if strings.HasSuffix(name, f.ext) && (f.format != dsl.FormatParquet || name == strings.ToLower(path)) {
			return f.format, true
		}
	}
	return "", false
}

// formatName names a format in messages.
func formatName(f string) string {
	if f == "" {
		return "delimited text"
	}
	return f
}

// headerNames reads the header line of a data file: its first non-blank
// record, split at delim, and its line number.
func headerNames(path string, delim byte) ([]string, int, error) {
	if delim == 0 {
		delim = ','
	}
	names, line, err := csvrow.Header(path, delim)
	if err == io.EOF {
		return nil, 0, fmt.Errorf("no header line")
	}
	if qe, ok := err.(*csvrow.Error); ok {
		return nil, 0, fmt.Errorf("%s", qe.At(line))
	}
	return names, line, err
}
