package serve

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data/criteo"
)

// BenchmarkInferCTR100Rows is one request of 100 rows of examples/ctr.yaml
// through the handler, without the network: decode, parse and normalize
// the rows, run the model, encode the response.
func BenchmarkInferCTR100Rows(b *testing.B) {
	var buf bytes.Buffer
	if err := criteo.Write(&buf, criteo.Options{Rows: 100, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	g := ctrExample(b, buf.Bytes())
	p := randomParams(b, g, 1)
	p.Norm.Shift, p.Norm.Scale = p.Norm.Shift[:13], p.Norm.Scale[:13]
	m, err := NewModel(g, p, 0)
	if err != nil {
		b.Fatal(err)
	}
	body := rowsBody(strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n"))
	h := NewHandler(m, HandlerOptions{})
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v2/models/ctr/infer", bytes.NewReader(body)))
			if w.Code != 200 {
				b.Fatalf("%d %s", w.Code, w.Body)
			}
		}
	})
	b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "rows/s")
}

// ctrExample is examples/ctr.yaml reading rows (a file written for it).
func ctrExample(tb testing.TB, rows []byte) *dsl.Graph {
	tb.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "ctr.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ctr.tsv"), rows, 0o644); err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(dir, "ctr.yaml")
	if err := os.WriteFile(path, bytes.Replace(src, []byte("csv: data/ctr.tsv"), []byte("csv: ctr.tsv"), 1), 0o644); err != nil {
		tb.Fatal(err)
	}
	g, err := dsl.Load(path)
	if err != nil {
		tb.Fatal(err)
	}
	return g
}
