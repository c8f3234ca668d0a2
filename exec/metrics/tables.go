package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// TableStats is one dynamic table's state as the metrics export it
// (exec/dyntable.Stats, for the node's shard of the table).
type TableStats struct {
	Table                                 string
	Live, Held                            int64
	Admitted, EvictedTTL, EvictedCapacity uint64
	Bytes                                 int64
}

// WatchTables exports the dynamic tables that stats lists, read at each
// scrape (nothing per step): live and held rows and bytes as gauges,
// admissions and evictions by ttl and by capacity as counters, each
// labeled with the table.
func (n *Node) WatchTables(stats func() []TableStats) {
	if n == nil {
		return
	}
	c := prometheus.Labels{"node": n.name}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append([]string{"table"}, labels...), c)
	}
	n.reg.MustRegister(&tableCollector{stats: stats,
		live:    desc("psgraph_dynamic_table_live_rows", "Rows of the dynamic table a lookup finds on this node."),
		held:    desc("psgraph_dynamic_table_held_rows", "Rows of the dynamic table in memory on this node: the live ones and expired or evicted ones not reclaimed yet."),
		bytes:   desc("psgraph_dynamic_table_bytes", "Memory of the dynamic table on this node: row pages, index, admission sketch and bookkeeping."),
		admit:   desc("psgraph_dynamic_table_admitted_total", "Keys the dynamic table admitted (a row created) on this node."),
		evicted: desc("psgraph_dynamic_table_evicted_total", "Rows of the dynamic table removed on this node, by reason: ttl (unseen for ttl_steps) or capacity.", "reason"),
	})
}

type tableCollector struct {
	stats                             func() []TableStats
	live, held, bytes, admit, evicted *prometheus.Desc
}

func (c *tableCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.live
	ch <- c.held
	ch <- c.bytes
	ch <- c.admit
	ch <- c.evicted
}

func (c *tableCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.stats() {
		ch <- prometheus.MustNewConstMetric(c.live, prometheus.GaugeValue, float64(s.Live), s.Table)
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(s.Held), s.Table)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(s.Bytes), s.Table)
		ch <- prometheus.MustNewConstMetric(c.admit, prometheus.CounterValue, float64(s.Admitted), s.Table)
		ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.CounterValue, float64(s.EvictedTTL), s.Table, "ttl")
		ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.CounterValue, float64(s.EvictedCapacity), s.Table, "capacity")
	}
}
