package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// An online run's stream is on /metrics: rows, bad rows, lag, rate, the
// Kafka round robin's turns passed over and the windowed loss and
// metrics, as last set; the lag -1 while unknown.
func TestStreamMetrics(t *testing.T) {
	n := New("local")
	s := n.WatchStream([]string{"loss", "auc"})
	scrape := func() string {
		rec := httptest.NewRecorder()
		n.Handler().ServeHTTP(rec, httptest.NewRequest("GET", MetricsPath, nil))
		b, _ := io.ReadAll(rec.Body)
		return string(b)
	}
	if out := scrape(); !strings.Contains(out, `psgraph_stream_lag_messages{node="local"} -1`) {
		t.Errorf("before any step the lag is not -1:\n%s", out)
	}
	s.Progress(1280, 3, 4000, true)
	s.Window([]float64{0.45, 0.75}, 51200)
	s.IdleSkips(17)
	out := scrape()
	for _, want := range []string{
		`psgraph_stream_rows_total{node="local"} 1280`,
		`psgraph_stream_bad_rows_total{node="local"} 3`,
		`psgraph_stream_lag_messages{node="local"} 4000`,
		`psgraph_stream_rows_per_second{node="local"} 51200`,
		`psgraph_stream_idle_skips_total{node="local"} 17`,
		`psgraph_stream_window{metric="loss",node="local"} 0.45`,
		`psgraph_stream_window{metric="auc",node="local"} 0.75`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	var nilStream *Stream
	nilStream.Progress(1, 1, 1, true) // a run without --metrics-addr
	nilStream.Window(nil, 0)
	nilStream.IdleSkips(1)
	if (*Node)(nil).WatchStream(nil) != nil {
		t.Error("a nil Node's stream is not nil")
	}
}
