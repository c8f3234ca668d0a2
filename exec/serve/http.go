package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// Predictor is what the HTTP front computes with: a Model, or a twin in
// tests.
type Predictor interface {
	Meta() *Meta
	Ready() bool
	Version() int64
	// VersionIs says what Version counts: VersionStep or VersionLoads.
	VersionIs() string
	// Infer computes req's outputs into res, reusing its slices.
	Infer(ctx context.Context, req *Request, res *Result) error
}

// HandlerOptions configures a Handler.
type HandlerOptions struct {
	// MaxBody is the largest request body accepted (413 past it; 0:
	// DefaultMaxBody).
	MaxBody int64
	// MaxConcurrent is how many inference requests are computed at once;
	// one more is refused with 503 and Retry-After, never queued (0:
	// DefaultMaxConcurrent).
	MaxConcurrent int
	// Load re-reads the model for the repository extension's load (nil:
	// the server cannot reload; 400).
	Load    func() error
	Metrics *Metrics
	Log     zerolog.Logger
	// Version is the server's own version (server metadata).
	Version string
}

// statusClientGone is the status the metrics count for a request whose
// client left before its answer (nginx's 499): none is written.
const statusClientGone = 499

// Defaults of the limits.
const (
	DefaultMaxBody       = 16 << 20
	DefaultMaxConcurrent = 16
)

// Handler answers the Open Inference Protocol's REST endpoints for one
// model, and /metrics.
type Handler struct {
	p        Predictor
	opt      HandlerOptions
	sem      chan struct{}
	draining atomic.Bool
	mux      *http.ServeMux
}

// NewHandler serves p.
func NewHandler(p Predictor, opt HandlerOptions) *Handler {
	if opt.MaxBody <= 0 {
		opt.MaxBody = DefaultMaxBody
	}
	if opt.MaxConcurrent <= 0 {
		opt.MaxConcurrent = DefaultMaxConcurrent
	}
	h := &Handler{p: p, opt: opt, sem: make(chan struct{}, opt.MaxConcurrent), mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /v2/health/live", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"live": true})
	})
	h.mux.HandleFunc("GET /v2/health/ready", func(w http.ResponseWriter, r *http.Request) {
		ready := h.Ready()
		writeJSON(w, readyStatus(ready), map[string]bool{"ready": ready})
	})
	h.mux.HandleFunc("GET /v2", h.serverMeta)
	h.mux.HandleFunc("GET /v2/models/{name}", h.modelMeta)
	h.mux.HandleFunc("GET /v2/models/{name}/versions/{version}", h.modelMeta)
	h.mux.HandleFunc("GET /v2/models/{name}/ready", h.modelReady)
	h.mux.HandleFunc("GET /v2/models/{name}/versions/{version}/ready", h.modelReady)
	h.mux.HandleFunc("POST /v2/models/{name}/infer", h.infer)
	h.mux.HandleFunc("POST /v2/models/{name}/versions/{version}/infer", h.infer)
	h.mux.HandleFunc("POST /v2/repository/index", h.index)
	h.mux.HandleFunc("POST /v2/repository/models/{name}/load", h.load)
	h.mux.HandleFunc("POST /v2/repository/models/{name}/unload", func(w http.ResponseWriter, r *http.Request) {
		if h.known(w, r) {
			writeError(w, http.StatusBadRequest, "psgraph serves one model and cannot unload it; stop the server instead")
		}
	})
	if opt.Metrics != nil {
		h.mux.Handle("GET /metrics", promhttp.HandlerFor(opt.Metrics.reg, promhttp.HandlerOpts{}))
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("%s %s is not an endpoint of psgraph serve; see GET /v2 and /v2/models/%s", r.Method, r.URL.Path, p.Meta().Name))
	})
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Ready says whether the server takes requests: the model is ready and
// the server is not draining.
func (h *Handler) Ready() bool { return !h.draining.Load() && h.p.Ready() }

// Drain makes the server not ready (a SIGTERM): load balancers stop
// sending it requests while those in flight finish.
func (h *Handler) Drain() { h.draining.Store(true) }

// readyStatus is the status of a readiness answer: 200, or 400 as the
// protocol's "4xx for false".
func readyStatus(ready bool) int {
	if ready {
		return http.StatusOK
	}
	return http.StatusBadRequest
}

func (h *Handler) serverMeta(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"name": "psgraph", "version": h.opt.Version, "extensions": []string{"model_repository"}})
}

// known checks the path's model name (404 if it is not the model) and
// version (404 if it is not the one served).
func (h *Handler) known(w http.ResponseWriter, r *http.Request) bool {
	m := h.p.Meta()
	if name := r.PathValue("name"); name != m.Name {
		writeError(w, http.StatusNotFound, fmt.Sprintf("model %q is not served here; this server serves %q", name, m.Name))
		return false
	}
	if v := r.PathValue("version"); v != "" && h.p.Ready() && v != strconv.FormatInt(h.p.Version(), 10) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("version %s of model %q is not served; this server serves version %d, the newest (leave the version out of the path to get whichever is newest)", v, m.Name, h.p.Version()))
		return false
	}
	return true
}

func (h *Handler) modelMeta(w http.ResponseWriter, r *http.Request) {
	if !h.known(w, r) {
		return
	}
	m := h.p.Meta()
	var versions []string
	if h.p.Ready() {
		versions = []string{strconv.FormatInt(h.p.Version(), 10)}
	}
	md := map[string]any{"name": m.Name, "versions": versions, "platform": "psgraph", "inputs": m.Inputs, "outputs": m.Outputs}
	if h.p.Ready() {
		md["parameters"] = map[string]any{"version_is": h.p.VersionIs()}
	}
	writeJSON(w, http.StatusOK, md)
}

func (h *Handler) modelReady(w http.ResponseWriter, r *http.Request) {
	if !h.known(w, r) {
		return
	}
	ready := h.Ready()
	writeJSON(w, readyStatus(ready), map[string]any{"name": h.p.Meta().Name, "ready": ready})
}

func (h *Handler) index(w http.ResponseWriter, r *http.Request) {
	state, version := "UNAVAILABLE", ""
	if h.p.Ready() {
		state, version = "READY", strconv.FormatInt(h.p.Version(), 10)
	}
	writeJSON(w, http.StatusOK, []map[string]string{{"name": h.p.Meta().Name, "version": version, "state": state}})
}

// load is the repository extension's load: the model is read again
// (--init-from) and swapped in; requests go on meanwhile.
func (h *Handler) load(w http.ResponseWriter, r *http.Request) {
	if !h.known(w, r) {
		return
	}
	if h.opt.Load == nil {
		writeError(w, http.StatusBadRequest, "this server follows a job and takes its updates; there is no model file to load")
		return
	}
	if err := h.opt.Load(); err != nil {
		writeError(w, StatusOf(err), err.Error())
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

// infer answers an inference request: admitted if a slot is free (else
// 503), its body read up to the limit (else 413), decoded and checked
// (else 400), computed, and answered in JSON.
func (h *Handler) infer(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	code := h.inferCode(w, r)
	if m := h.opt.Metrics; m != nil {
		o := m.latency200
		if code != http.StatusOK {
			o = m.latency.WithLabelValues(strconv.Itoa(code))
		}
		o.Observe(time.Since(start).Seconds())
	}
}

func (h *Handler) inferCode(w http.ResponseWriter, r *http.Request) int {
	if !h.known(w, r) {
		return http.StatusNotFound
	}
	if !h.Ready() {
		return writeError(w, http.StatusServiceUnavailable, "the model is not ready: no parameters loaded yet, or the server is stopping")
	}
	select {
	case h.sem <- struct{}{}:
		defer func() { <-h.sem }()
	default:
		w.Header().Set("Retry-After", "1")
		return writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("the server computes %d requests at once and has no slot free; retry after a second, or run more replicas", cap(h.sem)))
	}
	if m := h.opt.Metrics; m != nil {
		m.inFlight.Inc()
		defer m.inFlight.Dec()
	}
	bufs := bufPool.Get().(*reqBufs)
	defer bufs.put()
	body, err := bufs.readBody(w, r, h.opt.MaxBody)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is larger than %d bytes (--max-body); send fewer rows a request", h.opt.MaxBody))
		}
		return writeError(w, http.StatusBadRequest, fmt.Sprintf("reading the request body: %v", err))
	}
	meta := h.p.Meta()
	bufs.split.delim = meta.delim
	req, err := decodeRequest(body, meta, decodeHow{lines: bufs.lines, text: &bufs.text, split: &bufs.split})
	if err != nil {
		return writeError(w, StatusOf(err), err.Error())
	}
	if cap(req.Lines) > cap(bufs.lines) {
		bufs.lines = req.Lines[:0]
	}
	err = h.p.Infer(r.Context(), req, &bufs.res)
	if err != nil && r.Context().Err() != nil {
		return statusClientGone // nobody to answer
	}
	if err != nil {
		code := StatusOf(err)
		if code >= 500 {
			h.opt.Log.Error().Err(err).Msg("inference failed")
		}
		return writeError(w, code, err.Error())
	}
	if h.opt.Metrics != nil {
		h.opt.Metrics.rows.Add(float64(req.Rows))
	}
	out := appendResponse(bufs.out[:0], h.p.Meta().Name, &bufs.res)
	bufs.out = out
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	w.Write(out)
	return http.StatusOK
}

// appendResponse writes the protocol's $inference_response: model_name,
// model_version, id, and the outputs with their data flat, row-major;
// float32 values in their shortest exact form (null for one not finite).
func appendResponse(b []byte, model string, res *Result) []byte {
	b = append(b, `{"model_name":`...)
	b = appendString(b, model)
	b = append(b, `,"model_version":"`...)
	b = strconv.AppendInt(b, res.Version, 10)
	b = append(b, '"')
	if res.ID != "" {
		b = append(b, `,"id":`...)
		b = appendString(b, res.ID)
	}
	b = append(b, `,"outputs":[`...)
	for i, o := range res.Outputs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, o.Name)
		b = append(b, `,"datatype":"`...)
		b = append(b, o.Datatype...)
		b = append(b, `","shape":[`...)
		for j, d := range o.Shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, `],"data":[`...)
		if o.Datatype != dtFP32 {
			for j, v := range o.Ints {
				if j > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendInt(b, v, 10)
			}
		} else {
			for j, v := range o.Floats {
				if j > 0 {
					b = append(b, ',')
				}
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					b = append(b, "null"...)
				} else {
					b = strconv.AppendFloat(b, float64(v), 'g', -1, 32)
				}
			}
		}
		b = append(b, "]}"...)
	}
	return append(b, "]}\n"...)
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	if !strings.ContainsAny(s, "\"\\<>&") && isPlain(s) {
		return append(append(append(b, '"'), s...), '"')
	}
	q, _ := json.Marshal(s)
	return append(b, q...)
}

func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
	return code
}

// writeError answers the protocol's error body, {"error": msg}.
func writeError(w http.ResponseWriter, code int, msg string) int {
	return writeJSON(w, code, map[string]string{"error": msg})
}

// readBody reads a request's body, at most max bytes (an
// *http.MaxBytesError past it), into a buffer sized by its Content-Length
// when it gives one within the limit.
func (b *reqBufs) readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, max)
	if n := r.ContentLength; n > 0 && n <= max {
		if int64(cap(b.body)) < n {
			b.body = make([]byte, n)
		}
		buf := b.body[:n]
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		// the body must end where its length says
		if k, err := rd.Read(b.one[:]); k > 0 || err != nil && err != io.EOF {
			return nil, fmt.Errorf("the body is longer than its Content-Length")
		}
		return buf, nil
	}
	buf := b.body[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			b.body = buf
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// reqBufs are a request's buffers, reused: its body, its lines (slices
// of the body or of text, where those with escapes are decoded), its
// outputs and its response.
type reqBufs struct {
	body, text, out []byte
	lines           [][]byte
	split           splitBufs
	res             Result
	one             [1]byte
}

var bufPool = sync.Pool{New: func() any { return new(reqBufs) }}

// maxPooled is the largest buffer kept for the next request: a rare
// large request's memory is not held.
const maxPooled = 1 << 20

func (b *reqBufs) put() {
	if cap(b.body) > maxPooled {
		b.body = nil
	}
	if cap(b.out) > maxPooled {
		b.out = nil
	}
	if cap(b.text) > maxPooled {
		b.text = nil
	}
	if cap(b.lines) > maxPooled/64 {
		b.lines = nil
	}
	if cap(b.split.bounds) > maxPooled/4 || cap(b.split.at) > maxPooled/4 {
		b.split.bounds, b.split.at = nil, nil
	}
	b.split.rows = SplitRows{}    // hold no body but the one kept
	clear(b.lines[:cap(b.lines)]) // hold no body but the one kept
	for _, o := range b.res.Outputs {
		if cap(o.Ints)*8 > maxPooled || cap(o.Floats)*4 > maxPooled {
			b.res.Outputs = nil
		}
	}
	bufPool.Put(b)
}
