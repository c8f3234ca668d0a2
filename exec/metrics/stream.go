package metrics

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Stream is an online run's stream as the metrics export it: the rows it
// trained and skipped, how far behind the source's end it is, its rows
// per second, and the progressive validation's windowed loss and
// metrics. The training loop sets them (atomics and, at each progress
// line, the window under a lock); a scrape reads them. Every method of a
// nil *Stream does nothing.
type Stream struct {
	rows, bad atomic.Int64
	skips     atomic.Int64
	lag       atomic.Int64 // -1: unknown
	rate      atomic.Uint64
	mu        sync.Mutex
	names     []string
	window    []float64
}

// WatchStream exports an online run's stream; names are the windowed
// values' names (the loss, then the metrics), in the order Window takes
// them. Nil for a nil Node.
func (n *Node) WatchStream(names []string) *Stream {
	if n == nil {
		return nil
	}
	s := &Stream{names: names, window: make([]float64, len(names))}
	s.lag.Store(-1)
	for i := range s.window {
		s.window[i] = math.NaN()
	}
	c := prometheus.Labels{"node": n.name}
	n.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "psgraph_stream_rows_total", ConstLabels: c,
			Help: "Records of the online source the steps so far trained on or skipped (bad rows, another trainer's rows of a file)."},
			func() float64 { return float64(s.rows.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "psgraph_stream_bad_rows_total", ConstLabels: c,
			Help: "Rows of the online source that did not parse and were skipped (data.on_bad_row: skip)."},
			func() float64 { return float64(s.bad.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "psgraph_stream_idle_skips_total", ConstLabels: c,
			Help: "Turns of the Kafka source's round robin passed over because their partition had no message for data.kafka.idle_after while others had some."},
			func() float64 { return float64(s.skips.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "psgraph_stream_lag_messages", ConstLabels: c,
			Help: "Messages of the Kafka source after the rows trained (behind the partitions' log ends as of the last fetch); -1 while unknown or for a file source."},
			func() float64 { return float64(s.lag.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "psgraph_stream_rows_per_second", ConstLabels: c,
			Help: "Rows per second the run trained between its last two progress lines."},
			func() float64 { return math.Float64frombits(s.rate.Load()) }),
		&windowCollector{s: s, desc: prometheus.NewDesc("psgraph_stream_window",
			"The progressive validation's loss and metrics over the last data.metrics_window rows, each row scored before the update it took part in; as of the last progress line.", []string{"metric"}, c)},
	)
	return s
}

// Progress records the stream's records consumed by the steps so far, of
// them bad rows skipped, and its lag (known: false for none).
func (s *Stream) Progress(records, bad, lag int64, known bool) {
	if s == nil {
		return
	}
	s.rows.Store(records)
	s.bad.Store(bad)
	if !known {
		lag = -1
	}
	s.lag.Store(lag)
}

// IdleSkips records the turns of the round robin passed over so far.
func (s *Stream) IdleSkips(n int64) {
	if s != nil {
		s.skips.Store(n)
	}
}

// Window records the windowed values, in WatchStream's order, and the
// rows per second.
func (s *Stream) Window(vals []float64, rowsPerS float64) {
	if s == nil {
		return
	}
	s.rate.Store(math.Float64bits(rowsPerS))
	s.mu.Lock()
	copy(s.window, vals)
	s.mu.Unlock()
}

type windowCollector struct {
	s    *Stream
	desc *prometheus.Desc
}

func (c *windowCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *windowCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for i, name := range c.s.names {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, c.s.window[i], name)
	}
}
