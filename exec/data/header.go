package data

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/psgraph/psgraph/dsl"
)

// Other is WithFile for a file that must have the columns of spec's own
// (held-out, evaluation and prediction data). Columns are read by
// position, so when the data has a header line (data.header) and spec's
// file is there to compare with, both headers must name the same columns
// at the positions both have: a prediction file may lack a last label
// column, but not hold its columns in another order.
func Other(spec *dsl.Data, path string) (*dsl.Data, error) {
	o := WithFile(spec, path)
	if !spec.Header || spec.CSV == "" || path == spec.CSV {
		return o, nil
	}
	want, _, err := headerNames(spec.CSV, o.Delimiter)
	if err != nil {
		return o, nil // no training file here (a model copied for prediction): nothing to compare
	}
	got, line, err := headerNames(path, o.Delimiter)
	if err != nil {
		return o, nil // the reader of path reports it
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return nil, fmt.Errorf("%s:%d: column %d is named %q, but the model's data file %s names it %q; columns are read by position, so this file must hold the model's columns in the same order", path, line, i, got[i], spec.CSV, want[i])
		}
	}
	return o, nil
}

// headerNames reads the header line of a data file: its first non-blank
// line, split at delim, and its line number.
func headerNames(path string, delim byte) ([]string, int, error) {
	if delim == 0 {
		delim = ','
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	lr := &lineReader{r: bufio.NewReaderSize(f, 64<<10)}
	for {
		line, err := lr.next()
		if err == io.EOF {
			return nil, 0, fmt.Errorf("%s: no header line", path)
		}
		if err != nil {
			return nil, 0, err
		}
		if line = dsl.TrimField(line, delim); len(line) > 0 {
			var names []string
			for _, f := range bytes.Split(line, []byte{delim}) {
				names = append(names, string(dsl.TrimField(f, delim)))
			}
			return names, lr.line, nil
		}
	}
}
