package trainer

import (
	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/data"
)

// reportTruncated logs, once per run, the fields of multi-valued ids
// columns that held more ids than their max_len (each kept its first
// max_len): counted over the file for data loaded into memory, over the
// rows this node's batches read for a streamed file (docs/dsl.md,
// "Several specs and multi-valued columns").
func reportTruncated(log zerolog.Logger, set *data.Set, file *data.FileStream) {
	var cut []data.Truncation
	switch {
	case set != nil:
		cut = set.Truncated()
	case file != nil:
		cut = file.Truncated()
	}
	for _, t := range cut {
		log.Warn().Int64("fields", t.Fields).Msg(data.DescribeTruncation(t))
	}
}
