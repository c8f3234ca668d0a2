package serve

import (
	"bytes"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/blas"
	"github.com/psgraph/psgraph/exec/data/criteo"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/internal/testfix"
)

// BenchmarkInferCTR100Rows is one request of 100 rows of examples/ctr.yaml
// through the handler, without the network: decode, parse and normalize
// the rows, run the model, encode the response. cpu-µs/req is the
// process's CPU time (getrusage) per request, which a loaded machine
// changes less than ns/op; shared-blocks/req the blocks of its products
// offered to blas's helper goroutines (serialKernels):
// go test ./exec/serve -run X -bench InferCTR100Rows -benchmem -cpu 2
func BenchmarkInferCTR100Rows(b *testing.B) { benchInferCTR(b, 1) }

// BenchmarkInferCTR100Rows4Clients is BenchmarkInferCTR100Rows from 2
// goroutines a P: with -cpu 2, the 4 clients of bench/serve-bench.sh on
// its 2 cores.
func BenchmarkInferCTR100Rows4Clients(b *testing.B) { benchInferCTR(b, 2) }

func benchInferCTR(b *testing.B, perP int) {
	g, p, lines := ctrServed(b, 100, 1)
	m, err := NewModel(g, p, 0)
	if err != nil {
		b.Fatal(err)
	}
	body := rowsBody(lines)
	h := NewHandler(m, HandlerOptions{})
	b.SetParallelism(perP)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, shared0 := testfix.ProcessCPU(), blas.SharedBlocks()
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
	b.ReportMetric(float64((testfix.ProcessCPU()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/req")
	b.ReportMetric(float64(blas.SharedBlocks()-shared0)/float64(b.N), "shared-blocks/req")
}

// BenchmarkInferWhileReloading is requests of 100 rows of examples/ctr.yaml
// from 4 goroutines through the handler (no network), each request's
// latency taken: steady; while the model file (64 MiB) is read again and
// swapped in every 250 ms, as a reload does (SIGHUP, the repository
// extension's load); while an update (a dense parameter and 16,384 table
// rows) is applied every 125 ms, as a replica following a 2x2 job applies
// its two pservers' deltas; under the memory limit the server sets. It reports the
// p50 and p99 latency and the reloads or updates done: neither may stall
// the requests (a new version is given its programs before it is served,
// requests compute with the version they took, table rows are written
// between programs' runs):
// go test ./exec/serve -run X -bench InferWhileReloading -benchtime 4000x
func BenchmarkInferWhileReloading(b *testing.B) {
	g, p, lines := ctrServed(b, 100, 1)
	file := filepath.Join(b.TempDir(), "ctr.safetensors")
	if err := modelfile.SaveModel(file, "ctr", 1, g.ModelVars(), p.Tensors, p.Norm); err != nil {
		b.Fatal(err)
	}
	body := rowsBody(lines)
	r := rand.New(rand.NewPCG(1, 2))
	// an update as a replica following a 2x2 job of the example applies:
	// from each pserver every 250 ms, a dense block and ~16,000 table rows
	ids, rows, wt := make([]int64, 16384), make([]float32, 16384*16), make([]float32, 128*64)
	for _, c := range []struct {
		name   string
		every  time.Duration
		change func(m *Model, n int64) error
	}{
		{"steady", 0, nil},
		{"reloading", 250 * time.Millisecond, func(m *Model, n int64) error {
			src := &fileSource{g: g, path: file, log: zerolog.Nop(), model: m}
			return src.load()
		}},
		{"updating", 125 * time.Millisecond, func(m *Model, n int64) error {
			for i := range ids {
				ids[i] = r.Int64N(1_000_000)
			}
			for i := range wt {
				wt[i] = float32(r.NormFloat64())
			}
			return m.Apply(Update{Step: n, Dense: []DenseValues{{Name: "Wt1", Values: wt}}, Rows: []TableRows{{Name: "emb", IDs: ids, Values: rows}}})
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			m, err := NewModel(g, p, 0)
			if err != nil {
				b.Fatal(err)
			}
			if os.Getenv("GOMEMLIMIT") == "" {
				limitMemory(p.Bytes(), zerolog.Nop()) // as the server does
				defer debug.SetMemoryLimit(math.MaxInt64)
			}
			h := NewHandler(m, HandlerOptions{})
			infer := func() int {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v2/models/ctr/infer", bytes.NewReader(body)))
				if w.Code != 200 {
					b.Errorf("%d %s", w.Code, w.Body)
				}
				return w.Code
			}
			var warm sync.WaitGroup
			for range 4 { // the 4 programs the requests use, compiled before they are timed
				warm.Add(1)
				go func() { defer warm.Done(); infer() }()
			}
			warm.Wait()
			lat := make([]time.Duration, b.N)
			var next atomic.Int64
			done := make(chan struct{})
			changes := make(chan int64)
			go func() { // a reload or an update every c.every while the requests run
				n := int64(0)
				defer func() { changes <- n }()
				if c.change == nil {
					<-done
					return
				}
				tick := time.NewTicker(c.every)
				defer tick.Stop()
				for {
					select {
					case <-done:
						return
					case <-tick.C:
						n++
						if err := c.change(m, n+1); err != nil {
							b.Error(err)
							return
						}
					}
				}
			}()
			b.ResetTimer()
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
						start := time.Now()
						code := infer()
						lat[i] = time.Since(start)
						if code != 200 {
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			close(done)
			n := <-changes
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(n), "changes")
			b.ReportMetric(m.RowsWait()*1e6/float64(b.N), "rows-wait-µs/req")
		})
	}
}

// ctrServed is examples/ctr.yaml with random parameters (seed 1, the
// normalization of its 13 counts), and rows generated rows of it (seed):
// their lines.
func ctrServed(tb testing.TB, rows int, seed uint64) (*dsl.Graph, Params, []string) {
	tb.Helper()
	var buf bytes.Buffer
	if _, err := criteo.Generate(&buf, criteo.Options{Rows: int64(rows), Seed: seed}); err != nil {
		tb.Fatal(err)
	}
	g := ctrExample(tb, buf.Bytes())
	p := randomParams(tb, g, 1)
	p.Norm.Shift, p.Norm.Scale = p.Norm.Shift[:13], p.Norm.Scale[:13]
	return g, p, strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
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
