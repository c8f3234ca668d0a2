package ops

import "strconv"

// The names psgraph gives to the variables and transfers it makes, defined
// once: autodiff names gradients, split names the transfers of a placed
// graph, and the runtime and the kernels find them by these names.

// GradSuffix ends the name of a gradient (GradName).
const GradSuffix = "@GRAD"

// GradName is the name of the gradient of x; a gradient block's transfer
// and a table's row-gradient transfer have this name too.
func GradName(x string) string { return x + GradSuffix }

// TableIDs and TableRows name the transfers of a sharded table v's fetch:
// the ids a trainer asks a shard for, and the rows the shard answers.
func TableIDs(v string) string  { return v + "@ids" }
func TableRows(v string) string { return v + "@rows" }

// ClipPart and ClipFactorOf name the exchange of train.clip.norm in a
// split job: pserver j's partial sum of squares of its gradients, and the
// factor the trainers send it back.
func ClipPart(j int) string     { return clipPartPrefix + strconv.Itoa(j) }
func ClipFactorOf(j int) string { return clipFactorPrefix + strconv.Itoa(j) }

const (
	clipPartPrefix   = "clip@part."
	clipFactorPrefix = "clip@factor."
)

// IsClipPart and IsClipFactor tell the clip exchange's transfers by name.
func IsClipPart(v string) bool   { return indexed(v, clipPartPrefix) }
func IsClipFactor(v string) bool { return indexed(v, clipFactorPrefix) }

// indexed reports whether v is prefix followed by a pserver index.
func indexed(v, prefix string) bool {
	if len(v) <= len(prefix) || v[:len(prefix)] != prefix {
		return false
	}
	i, err := strconv.Atoi(v[len(prefix):])
	return err == nil && i >= 0 && strconv.Itoa(i) == v[len(prefix):]
}

// TableBundle is the transfer name of the bundled fetches of a split
// job's fixed tables (fetch_tables, serve_tables): one request and one
// reply per trainer, pserver and step for every table, not one per table.
// Its row gradients travel as GradName(TableBundle) (send_tables,
// accumulate_tables).
const TableBundle = "tables@bundle"

// FetchedSuffix ends the trainer's variable of a table's fetched rows.
const FetchedSuffix = "@fetched"

// FetchedName is the trainer's variable holding the rows of lookup table
// p that it fetched this step.
func FetchedName(p string) string { return p + FetchedSuffix }
