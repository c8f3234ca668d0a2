package trainer

import (
	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/data"
)

// reportTruncated logs, once per run, the fields of multi-valued ids
// columns that held more ids than their max_len (each kept its first
// max_len): counted over the file for data loaded into memory, over the
// rows this node's batches read for a streamed file, over the rows an
// online source's reader parsed once it is closed (docs/dsl.md, "Several
// specs and multi-valued columns").
func reportTruncated(log zerolog.Logger, set *data.Set, file *data.FileStream) {
	switch {
	case set != nil:
		logTruncated(log, set.Truncated())
	case file != nil:
		logTruncated(log, file.Truncated())
	}
}

// logTruncated logs each spec's truncated fields.
func logTruncated(log zerolog.Logger, cut []data.Truncation) {
	for _, t := range cut {
		log.Warn().Int64("fields", t.Fields).Msg(data.DescribeTruncation(t))
	}
}
