package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/tensor"
)

// digits is examples/digits-mlp.yaml: 64 features, 10 classes.
func digits(t testing.TB) *dsl.Graph {
	t.Helper()
	g, err := dsl.Load(filepath.Join("..", "..", "examples", "digits-mlp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// randomParams are parameters of g drawn from seed: each version of a
// test gets other weights, so its outputs tell it apart.
func randomParams(t testing.TB, g *dsl.Graph, seed uint64) Params {
	t.Helper()
	types, err := g.Infer(1)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 1))
	p := Params{Tensors: map[string]*tensor.Tensor{}, Norm: &data.Scaling{Mode: g.Data.Normalize}}
	for range 64 {
		p.Norm.Shift = append(p.Norm.Shift, r.Float64()*8)
		p.Norm.Scale = append(p.Norm.Scale, 1+r.Float64()*4)
	}
	for _, name := range g.ModelVars() {
		ty := types[name]
		x := tensor.New(ty.DType, ty.Shape)
		for i := range x.F {
			x.F[i] = float32(r.NormFloat64() * 0.3)
		}
		p.Tensors[name] = x
	}
	return p
}

// digitRows are n lines of the digits file's format (64 features and the
// label), drawn from seed.
func digitRows(n int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, 2))
	lines := make([]string, n)
	for i := range lines {
		f := make([]string, 65)
		for j := range 64 {
			f[j] = fmt.Sprint(r.IntN(17))
		}
		f[64] = fmt.Sprint(r.IntN(10))
		lines[i] = strings.Join(f, ",")
	}
	return lines
}

func rowsBody(lines []string) []byte {
	b, _ := json.Marshal(map[string]any{"inputs": []any{map[string]any{"name": "rows", "datatype": "BYTES", "shape": []int{len(lines)}, "data": lines}}})
	return b
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func post(t testing.TB, url string, body []byte) response {
	t.Helper()
	return answer(t)(http.Post(url, "application/json", bytes.NewReader(body)))
}

func get(t testing.TB, url string) response {
	t.Helper()
	return answer(t)(http.Get(url))
}

// answer reads a response whole.
func answer(t testing.TB) func(*http.Response, error) response {
	return func(resp *http.Response, err error) response {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return response{resp.StatusCode, resp.Header, b}
	}
}

// errorOf is the protocol's error body's message ("" if there is none).
func errorOf(b []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	json.Unmarshal(b, &e)
	return e.Error
}

// Bad input never takes the server down: each is answered with its
// status and an error body saying what is wrong, and a good request after
// all of them is answered.
func TestBadInputIsRefusedAndTheServerGoesOn(t *testing.T) {
	g := digits(t)
	m, err := NewModel(g, randomParams(t, g, 1), 0)
	if err != nil {
		t.Fatal(err)
	}
	met := NewMetrics(func() float64 { return float64(m.Version()) }, func() float64 { return 0 }, m.RowsWait)
	srv := httptest.NewServer(NewHandler(m, HandlerOptions{MaxBody: 8 << 10, Metrics: met}))
	defer srv.Close()
	infer := srv.URL + "/v2/models/digits-mlp/infer"
	good := digitRows(3, 1)
	short := slices.Clone(good)
	short[1] = strings.Join(strings.Split(short[1], ",")[:40], ",")
	notNum := slices.Clone(good)
	notNum[2] = strings.Replace(notNum[2], ",", ",abc,", 1)
	notNum[2] = strings.Join(strings.Split(notNum[2], ",")[:65], ",")
	for _, c := range []struct {
		name, url string
		body      []byte
		status    int
		want      string
	}{
		{"malformed json", infer, []byte(`{"inputs": [`), 400, "not an inference request in JSON"},
		{"wrong datatype", infer, []byte(`{"inputs":[{"name":"x","datatype":"INT32","shape":[1,64],"data":[1]}]}`), 400, `input "x" is "INT32", but it takes FP32`},
		{"wrong shape", infer, []byte(`{"inputs":[{"name":"x","datatype":"FP32","shape":[1,63],"data":[1]}]}`), 400, "it takes [N, 64]"},
		{"field count", infer, rowsBody(short), 400, "row 1: column 40 is missing"},
		{"not a number", infer, rowsBody(notNum), 400, `row 2: column 1: "abc" is not a number`},
		{"unknown output", infer, []byte(`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["` + good[0] + `"]}],"outputs":[{"name":"logitz"}]}`), 400, `has no variable "logitz" (pred and prob name a classifier's outputs) (did you mean "logits"?)`},
		{"output not a row each", infer, []byte(`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["` + good[0] + `"]}],"outputs":[{"name":"loss"}]}`), 400, `not one row per input row`},
		{"unknown model", srv.URL + "/v2/models/nope/infer", rowsBody(good), 404, `model "nope" is not served here; this server serves "digits-mlp"`},
		{"unknown version", srv.URL + "/v2/models/digits-mlp/versions/7/infer", rowsBody(good), 404, "version 7 of model \"digits-mlp\" is not served"},
		{"too large", infer, rowsBody(digitRows(200, 2)), 413, "larger than 8192 bytes"},
		{"unknown path", srv.URL + "/v3/infer", nil, 404, "is not an endpoint"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := post(t, c.url, c.body)
			if r.status != c.status || !strings.Contains(errorOf(r.body), c.want) {
				t.Errorf("%d %s, want %d with an error saying %q", r.status, r.body, c.status, c.want)
			}
		})
	}
	r := post(t, infer, rowsBody(good))
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"model_version":"0"`)) {
		t.Fatalf("a good request after the bad ones: %d %s", r.status, r.body)
	}
	// The same rows given as a typed FP32 tensor give the same outputs.
	var vals [][]float64
	for _, l := range good {
		var row []float64
		for _, f := range strings.Split(l, ",")[:64] {
			var v float64
			fmt.Sscan(f, &v)
			row = append(row, v)
		}
		vals = append(vals, row)
	}
	typed, _ := json.Marshal(map[string]any{"inputs": []any{map[string]any{"name": "x", "datatype": "FP32", "shape": []int{3, 64}, "data": vals}}})
	if rt := post(t, infer, typed); rt.status != 200 || !bytes.Equal(rt.body, r.body) {
		t.Errorf("typed features answered %d %s, rows %s", rt.status, rt.body, r.body)
	}
	metrics := string(get(t, srv.URL+"/metrics").body)
	for _, want := range []string{`psgraph_serve_request_seconds_count{code="200"} 2`, `psgraph_serve_request_seconds_count{code="400"} 7`,
		`psgraph_serve_request_seconds_count{code="404"} 2`, `psgraph_serve_request_seconds_count{code="413"} 1`,
		"psgraph_serve_rows_total 6", "psgraph_serve_model_version 0", "psgraph_serve_staleness_seconds 0"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// twin is an in-memory Predictor whose Infer waits until released, so a
// test holds requests in flight.
type twin struct {
	meta    Meta
	entered chan struct{}
	release chan struct{}
}

func newTwin() *twin {
	return &twin{meta: *ctrMeta(), entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (w *twin) Meta() *Meta       { return &w.meta }
func (w *twin) Ready() bool       { return true }
func (w *twin) Version() int64    { return 3 }
func (w *twin) VersionIs() string { return VersionLoads }
func (w *twin) Infer(ctx context.Context, req *Request, res *Result) error {
	w.entered <- struct{}{}
	<-w.release
	*res = Result{Version: 3, Outputs: []OutTensor{{Name: "prob", Datatype: dtFP32, Shape: []int64{int64(req.Rows)}, Floats: make([]float32, req.Rows)}}}
	return nil
}

var twinBody = []byte(`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["a"]}]}`)

// A request past --max-concurrent is refused at once with 503 and
// Retry-After, not queued; the ones in flight finish.
func TestTooManyRequestsAreRefused(t *testing.T) {
	w := newTwin()
	srv := httptest.NewServer(NewHandler(w, HandlerOptions{MaxConcurrent: 2}))
	defer srv.Close()
	url := srv.URL + "/v2/models/ctr/infer"
	done := make(chan response, 2)
	for range 2 {
		go func() {
			r, err := http.Post(url, "application/json", bytes.NewReader(twinBody))
			if err != nil {
				done <- response{status: -1}
				return
			}
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			done <- response{r.StatusCode, r.Header, b}
		}()
	}
	<-w.entered
	<-w.entered
	r := post(t, url, twinBody)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" || !strings.Contains(errorOf(r.body), "computes 2 requests at once") {
		t.Errorf("a third request: %d Retry-After %q %s, want 503 with Retry-After 1", r.status, r.header.Get("Retry-After"), r.body)
	}
	close(w.release)
	for range 2 {
		if r := <-done; r.status != 200 {
			t.Errorf("a request in flight: %d %s", r.status, r.body)
		}
	}
}

// A client that sends its headers too slowly is cut off: the server closes
// the connection after its header timeout.
func TestSlowClientIsCutOff(t *testing.T) {
	w := newTwin()
	h := NewHandler(w, HandlerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- serveHTTP(ctx, h, Options{Listen: "127.0.0.1:0", ReadTimeout: 200 * time.Millisecond, DrainTimeout: 5 * time.Second, Log: zerolog.Nop(),
			Listening: func(a net.Addr) { addrs <- a }}, func(ctx context.Context) error { <-ctx.Done(); return nil })
	}()
	addr := <-addrs
	conn, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v2/models/ctr/infer HTTP/1.1\r\nHost: x\r\n") // and never the rest
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, err := io.ReadAll(conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server kept a client that sent no headers for 20 s (read %q)", b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// On SIGTERM (its context ending) the server stops being ready at once,
// finishes the request in flight, and returns nil.
func TestStopDrainsRequestsInFlight(t *testing.T) {
	w := newTwin()
	h := NewHandler(w, HandlerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- serveHTTP(ctx, h, Options{Listen: "127.0.0.1:0", ReadTimeout: 5 * time.Second, DrainTimeout: 20 * time.Second, Log: zerolog.Nop(),
			Listening: func(a net.Addr) { addrs <- a }}, func(ctx context.Context) error { <-ctx.Done(); return nil })
	}()
	base := "http://" + (<-addrs).String()
	inflight := make(chan response, 1)
	go func() {
		r, err := http.Post(base+"/v2/models/ctr/infer", "application/json", bytes.NewReader(twinBody))
		if err != nil {
			inflight <- response{status: -1, body: []byte(err.Error())}
			return
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		inflight <- response{status: r.StatusCode, body: b}
	}()
	<-w.entered
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for h.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("still ready 10 s after the stop")
		}
		time.Sleep(time.Millisecond)
	}
	close(w.release)
	if r := <-inflight; r.status != 200 {
		t.Errorf("the request in flight: %d %s", r.status, r.body)
	}
	if err := <-done; err != nil {
		t.Errorf("stopping: %v", err)
	}
}

// Swapping versions under load fails no request, and each response's
// model_version names the parameters it was computed with: 4 clients send
// requests while the model file is rewritten and loaded again 12 times
// (the repository extension's load), and every answer equals the one a
// model holding only that version gives.
func TestHotSwapUnderLoad(t *testing.T) {
	g := digits(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "model.safetensors")
	const loads = 12
	body := rowsBody(digitRows(40, 7))
	want := map[string][]byte{} // version -> response body
	params := make([]Params, loads+2)
	for v := int64(1); v <= loads+1; v++ {
		params[v] = randomParams(t, g, uint64(v))
		m, err := NewModel(g, params[v], 0)
		if err != nil {
			t.Fatal(err)
		}
		req, err := DecodeRequest(body, m.Meta())
		if err != nil {
			t.Fatal(err)
		}
		res := new(Result)
		err = m.Infer(context.Background(), req, res)
		if err != nil {
			t.Fatal(err)
		}
		res.Version = v
		want[fmt.Sprint(v)] = appendResponse(nil, "digits-mlp", res)
	}
	save := func(v int64) {
		tmp := file + ".tmp"
		if err := modelfile.SaveModel(tmp, "digits-mlp", -1, g.ModelVars(), params[v].Tensors, params[v].Norm); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	save(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, g, Options{InitFrom: file, Listen: "127.0.0.1:0", Log: zerolog.Nop(), Listening: func(a net.Addr) { addrs <- a }})
	}()
	base := "http://" + (<-addrs).String()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]int{}
	var failures []string
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Post(base+"/v2/models/digits-mlp/infer", "application/json", bytes.NewReader(body))
				if err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var r struct {
					Version string `json:"model_version"`
				}
				json.Unmarshal(b, &r)
				mu.Lock()
				if resp.StatusCode != 200 || !bytes.Equal(b, want[r.Version]) {
					failures = append(failures, fmt.Sprintf("%d version %q: %.200s", resp.StatusCode, r.Version, b))
				}
				seen[r.Version]++
				mu.Unlock()
			}
		}()
	}
	// ranOn waits until a few requests ran on version v (a client that
	// failed ends the test instead).
	ranOn := func(v int64) {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
			mu.Lock()
			n, failed := seen[fmt.Sprint(v)], len(failures)
			mu.Unlock()
			if n >= 3 {
				return
			}
			if failed > 0 || time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("%d requests ran on version %d within a minute; %d failed (%v)", n, v, failed, failures)
			}
		}
	}
	for v := int64(2); v <= loads+1; v++ {
		ranOn(v - 1)
		save(v)
		if r := post(t, base+"/v2/repository/models/digits-mlp/load", nil); r.status != 200 {
			t.Fatalf("load %d: %d %s", v, r.status, r.body)
		}
	}
	ranOn(loads + 1) // the last version answers too before the clients stop
	close(stop)
	wg.Wait()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(failures) > 0 {
		t.Fatalf("%d requests failed or answered with other parameters than their version's; first: %s", len(failures), failures[0])
	}
	for v := 1; v <= loads+1; v++ {
		if seen[fmt.Sprint(v)] == 0 {
			t.Errorf("no request saw version %d (seen %v)", v, seen)
		}
	}
}

// A load of a broken file fails with 400 and leaves the model served as it
// was.
func TestFailedLoadKeepsTheModel(t *testing.T) {
	g := digits(t)
	file := filepath.Join(t.TempDir(), "model.safetensors")
	p := randomParams(t, g, 3)
	if err := modelfile.SaveModel(file, "digits-mlp", -1, g.ModelVars(), p.Tensors, p.Norm); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, g, Options{InitFrom: file, Listen: "127.0.0.1:0", Log: zerolog.Nop(), Listening: func(a net.Addr) { addrs <- a }})
	}()
	base := "http://" + (<-addrs).String()
	if err := os.WriteFile(file, []byte("not a model"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := post(t, base+"/v2/repository/models/digits-mlp/load", nil); r.status != 400 || !strings.Contains(errorOf(r.body), "the model served is unchanged") {
		t.Errorf("loading a broken file: %d %s", r.status, r.body)
	}
	r := post(t, base+"/v2/models/digits-mlp/infer", rowsBody(digitRows(2, 1)))
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"model_version":"1"`)) {
		t.Errorf("after the failed load: %d %s", r.status, r.body)
	}
	var meta struct {
		Versions []string `json:"versions"`
		Inputs   []struct {
			Name     string  `json:"name"`
			Datatype string  `json:"datatype"`
			Shape    []int64 `json:"shape"`
		} `json:"inputs"`
	}
	json.Unmarshal(get(t, base+"/v2/models/digits-mlp").body, &meta)
	if !slices.Equal(meta.Versions, []string{"1"}) || len(meta.Inputs) != 2 || meta.Inputs[1].Name != "x" || !slices.Equal(meta.Inputs[1].Shape, []int64{-1, 64}) {
		t.Errorf("metadata %+v", meta)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A model file's version is the training step it records (its metadata's
// "step", which --save and checkpoints write), in the responses and the
// model metadata; a file without one (written before psgraph recorded
// it) is numbered by the count of loads.
func TestFileStepIsTheVersion(t *testing.T) {
	g := digits(t)
	file := filepath.Join(t.TempDir(), "model.safetensors")
	p := randomParams(t, g, 5)
	save := func(step int64) {
		tmp := file + ".tmp"
		if err := modelfile.SaveModel(tmp, "digits-mlp", step, g.ModelVars(), p.Tensors, p.Norm); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	save(700)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, g, Options{InitFrom: file, Listen: "127.0.0.1:0", Log: zerolog.Nop(), Listening: func(a net.Addr) { addrs <- a }})
	}()
	base := "http://" + (<-addrs).String()
	check := func(version, is string) {
		t.Helper()
		r := post(t, base+"/v2/models/digits-mlp/infer", rowsBody(digitRows(2, 1)))
		if r.status != 200 || !bytes.Contains(r.body, []byte(`"model_version":"`+version+`"`)) {
			t.Errorf("a request: %d %s, want model_version %s", r.status, r.body, version)
		}
		var meta struct {
			Versions   []string          `json:"versions"`
			Parameters map[string]string `json:"parameters"`
		}
		json.Unmarshal(get(t, base+"/v2/models/digits-mlp").body, &meta)
		if !slices.Equal(meta.Versions, []string{version}) || meta.Parameters["version_is"] != is {
			t.Errorf("metadata %+v, want version %s, %s", meta, version, is)
		}
		if r := get(t, base+"/v2/models/digits-mlp/versions/"+version+"/ready"); r.status != 200 {
			t.Errorf("version %s's readiness: %d %s", version, r.status, r.body)
		}
	}
	check("700", VersionStep)
	save(-1) // no step recorded: the second load
	if r := post(t, base+"/v2/repository/models/digits-mlp/load", nil); r.status != 200 {
		t.Fatalf("load: %d %s", r.status, r.body)
	}
	check("2", VersionLoads)
	save(900)
	if r := post(t, base+"/v2/repository/models/digits-mlp/load", nil); r.status != 200 {
		t.Fatalf("load: %d %s", r.status, r.body)
	}
	check("900", VersionStep)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
