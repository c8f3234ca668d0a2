package serve

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the server's Prometheus metrics: request latency by status
// code, rows computed (their rate is rows/s), the version served, its
// staleness and the updates applied.
type Metrics struct {
	reg        *prometheus.Registry
	latency    *prometheus.HistogramVec
	latency200 prometheus.Observer // latency's for 200, looked up once
	rows       prometheus.Counter
	updates    prometheus.Counter
	inFlight   prometheus.Gauge
}

// requestBuckets cover 50 µs to ~6 s.
var requestBuckets = prometheus.ExponentialBuckets(50e-6, 2, 17)

// NewMetrics registers the server's metrics; version, staleness and
// rowsWait are read when scraped (staleness: seconds the served version
// is behind the newest one its source knows of, 0 when caught up;
// rowsWait: Model.RowsWait).
func NewMetrics(version, staleness, rowsWait func() float64) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "psgraph_serve_request_seconds", Buckets: requestBuckets,
		Help: "Wall time of one inference request, from its headers read to its response written, by HTTP status code."}, []string{"code"})
	m.latency200 = m.latency.WithLabelValues("200")
	m.rows = prometheus.NewCounter(prometheus.CounterOpts{Name: "psgraph_serve_rows_total",
		Help: "Rows the server computed outputs for (rate() of it: rows/s)."})
	m.updates = prometheus.NewCounter(prometheus.CounterOpts{Name: "psgraph_serve_updates_applied_total",
		Help: "New versions of the parameters the server swapped in: model file loads, and updates of the job it follows."})
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{Name: "psgraph_serve_requests_in_flight",
		Help: "Inference requests being computed now (at most --max-concurrent; more are refused with 503)."})
	m.reg.MustRegister(m.latency, m.rows, m.updates, m.inFlight,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "psgraph_serve_model_version",
			Help: "The version served: the training step of the job followed or the model file (the count of its loads for a file that records no step)."}, version),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "psgraph_serve_staleness_seconds",
			Help: "Seconds the served version is behind the newest its source has: the pservers' newest applied step (following a job), or a changed --init-from file not yet loaded; 0 when caught up."}, staleness),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "psgraph_serve_rows_wait_seconds_total",
			Help: "Seconds inference requests waited, in all, for updates of the job followed writing table rows before they could compute."}, rowsWait),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Updated counts one new version swapped in (nil: no metrics).
func (m *Metrics) Updated() {
	if m != nil {
		m.updates.Inc()
	}
}
