package pserver

import (
	"github.com/psgraph/psgraph/exec/metrics"
)

// A pserver's shards of dynamic tables (docs/runtime.md, "A dynamic table
// in a split job"): each part holding one compiles it into a
// dyntable.Table (program.Compile lowers its serve_rows and
// accumulate_rows into dyn_serve and dyn_accumulate).

// TableSummary is the state of this pserver's shard of a dynamic table
// at the end of the job (the summary line's "tables" member).
type TableSummary struct {
	Live            int64  `json:"live_rows"`
	Held            int64  `json:"held_rows"`
	Admitted        uint64 `json:"admitted"`
	EvictedTTL      uint64 `json:"evicted_ttl"`
	EvictedCapacity uint64 `json:"evicted_capacity"`
	Bytes           int64  `json:"bytes"`
}

// tableStats is the state of the parts' dynamic shards, named by their
// table (the Prometheus gauges and counters, the summary line).
func tableStats(parts []*part) []metrics.TableStats {
	var out []metrics.TableStats
	for _, p := range parts {
		for _, dt := range p.prog.Lowered {
			st := p.prog.Tables[dt.Name].Stats()
			out = append(out, metrics.TableStats{Table: dt.Dynamic.TableName(dt.Name), Live: st.Live, Held: st.Held,
				Admitted: st.Admitted, EvictedTTL: st.EvictedTTL, EvictedCapacity: st.EvictedCapacity, Bytes: st.Bytes.Total()})
		}
	}
	return out
}

// tableSummaries is tableStats as the summary line holds it (nil: none).
func tableSummaries(parts []*part) map[string]TableSummary {
	st := tableStats(parts)
	if len(st) == 0 {
		return nil
	}
	out := make(map[string]TableSummary, len(st))
	for _, t := range st {
		out[t.Table] = TableSummary{Live: t.Live, Held: t.Held, Admitted: t.Admitted,
			EvictedTTL: t.EvictedTTL, EvictedCapacity: t.EvictedCapacity, Bytes: t.Bytes}
	}
	return out
}
