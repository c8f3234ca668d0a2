package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
)

// Options configures Run.
type Options struct {
	InitFrom      string // the model file served (required)
	Listen        string // HOST:PORT
	MaxBody       int64  // 0: DefaultMaxBody
	MaxConcurrent int    // 0: DefaultMaxConcurrent
	MaxBatch      int    // 0: DefaultMaxBatch
	// ReadTimeout bounds reading a request, headers and body (0: 30 s);
	// headers alone get at most 5 s.
	ReadTimeout time.Duration
	// DrainTimeout bounds how long a stopping server waits for the
	// requests in flight (0: 30 s).
	DrainTimeout time.Duration
	Version      string // psgraph's, for the server metadata
	Log          zerolog.Logger
	// Listening, when set, is called once the server listens, with its
	// address (a --listen port 0 picks one).
	Listening func(addr net.Addr)
}

// fileSource is a model served from a file: each load reads it again and
// swaps it in as the next version.
type fileSource struct {
	g    *dsl.Graph
	path string
	log  zerolog.Logger
	mu   sync.Mutex // one load at a time
	// loadCount counts the file's reads (the version of a file that
	// records no step).
	loadCount int64
	mod       time.Time // of the file last loaded
	model     *Model
	met       *Metrics
}

// read loads the file as the next version's parameters.
func (f *fileSource) read() (Params, time.Time, error) {
	fi, err := os.Stat(f.path)
	if err != nil {
		return Params{}, time.Time{}, fmt.Errorf("--init-from %s: %w", f.path, err)
	}
	p, err := LoadParams(f.g, f.path, f.log)
	if err != nil {
		return Params{}, time.Time{}, err
	}
	f.loadCount++
	if p.VersionIs != VersionStep { // a file that records no step: its loads are counted
		p.Version = f.loadCount
	}
	return p, fi.ModTime(), nil
}

// load reads the file again and swaps it in.
func (f *fileSource) load() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	start := time.Now()
	p, mod, err := f.read()
	if err != nil {
		f.log.Error().Err(err).Msg("loading the model file failed; the model served is unchanged")
		return &Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("%v; the model served is unchanged", err)}
	}
	f.mod = mod
	f.model.Swap(p)
	f.met.Updated()
	f.log.Info().Str("file", f.path).Int64("version", p.Version).Dur("took", time.Since(start)).Msg("loaded the model file")
	return nil
}

// staleness is how long ago the file changed after it was last loaded (0:
// the version served is the file's).
func (f *fileSource) staleness() float64 {
	f.mu.Lock()
	mod := f.mod
	f.mu.Unlock()
	fi, err := os.Stat(f.path)
	if err != nil || !fi.ModTime().After(mod) {
		return 0
	}
	return time.Since(fi.ModTime()).Seconds()
}

// Run serves model g with the parameters of opt.InitFrom until ctx ends
// (SIGTERM): then it stops being ready, lets the requests in flight
// finish and returns nil. SIGHUP, like the repository extension's load,
// reads the file again and swaps it in without failing a request.
func Run(ctx context.Context, g *dsl.Graph, opt Options) error {
	if opt.ReadTimeout <= 0 {
		opt.ReadTimeout = 30 * time.Second
	}
	if opt.DrainTimeout <= 0 {
		opt.DrainTimeout = 30 * time.Second
	}
	src := &fileSource{g: g, path: opt.InitFrom, log: opt.Log}
	p, mod, err := src.read()
	if err != nil {
		return err
	}
	src.mod = mod
	limitMemory(p.Bytes(), opt.Log)
	m, err := NewModel(g, p, opt.MaxBatch)
	if err != nil {
		return err
	}
	src.model = m
	src.met = NewMetrics(func() float64 { return float64(m.Version()) }, src.staleness, m.RowsWait)
	src.met.Updated()
	h := NewHandler(m, HandlerOptions{MaxBody: opt.MaxBody, MaxConcurrent: opt.MaxConcurrent, Load: src.load, Metrics: src.met, Log: opt.Log, Version: opt.Version})
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	return serveHTTP(ctx, h, opt, func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				opt.Log.Info().Msg("SIGHUP: loading the model file again")
				src.load()
			}
		}
	})
}

// RunFollow serves model g following the running job of fo.Plan (psgraph
// serve --plan): the model is zero until every pserver's full state
// arrived (/v2/health/ready answers 400 until then), then follows every
// step they apply; a lost or restarted pserver is subscribed to again.
// It returns nil when ctx ends (SIGTERM), after draining.
func RunFollow(ctx context.Context, g *dsl.Graph, opt Options, fo FollowOptions) error {
	if opt.ReadTimeout <= 0 {
		opt.ReadTimeout = 30 * time.Second
	}
	if opt.DrainTimeout <= 0 {
		opt.DrainTimeout = 30 * time.Second
	}
	f, err := newFollower(g, fo, opt.MaxBatch, opt.Log)
	if err != nil {
		return err
	}
	limitMemory(f.cur.Load().Bytes(), opt.Log)
	met := NewMetrics(func() float64 { return float64(f.Version()) }, f.staleness, f.RowsWait)
	h := NewHandler(f, HandlerOptions{MaxBody: opt.MaxBody, MaxConcurrent: opt.MaxConcurrent, Metrics: met, Log: opt.Log, Version: opt.Version})
	return serveHTTP(ctx, h, opt, func(ctx context.Context) error { return f.run(ctx, met) })
}

// serveHTTP listens on opt.Listen and serves h until ctx ends, running
// loop (the source's: reloads, updates) beside it; then it drains. An
// error of loop stops the server and is returned.
func serveHTTP(ctx context.Context, h *Handler, opt Options, loop func(context.Context) error) error {
	ln, err := net.Listen("tcp", opt.Listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", opt.Listen, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(5*time.Second, opt.ReadTimeout),
		ReadTimeout:       opt.ReadTimeout,
		WriteTimeout:      opt.ReadTimeout + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	lctx, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	loopErr := make(chan error, 1)
	go func() { loopErr <- loop(lctx) }()
	opt.Log.Info().Str("addr", ln.Addr().String()).Str("model", h.p.Meta().Name).Int64("version", h.p.Version()).
		Msgf("serving the Open Inference Protocol at http://%s/v2/models/%s", ln.Addr(), h.p.Meta().Name)
	if opt.Listening != nil {
		opt.Listening(ln.Addr())
	}
	var failed error
	select {
	case err := <-served:
		stopLoop()
		<-loopErr
		return fmt.Errorf("serving %s: %w", ln.Addr(), err)
	case failed = <-loopErr:
		if failed == nil {
			failed = errors.New("the model's source stopped")
		}
	case <-ctx.Done():
	}
	h.Drain()
	opt.Log.Info().Dur("timeout", opt.DrainTimeout).Msg("stopping: not ready, finishing the requests in flight")
	dctx, cancel := context.WithTimeout(context.Background(), opt.DrainTimeout)
	defer cancel()
	err = srv.Shutdown(dctx)
	stopLoop()
	if failed == nil {
		<-loopErr
	}
	if failed != nil {
		return failed
	}
	if err != nil {
		return fmt.Errorf("stopping: requests still in flight after %v: %w", opt.DrainTimeout, err)
	}
	opt.Log.Info().Msg("stopped")
	return nil
}

// memoryHeadroom is what the server may hold beside its parameters: its
// programs, the requests in flight, the runtime.
const memoryHeadroom = 32 << 20

// limitMemory sets the Go runtime's soft memory limit to the parameters'
// bytes and memoryHeadroom, unless GOMEMLIMIT sets one: the garbage of
// requests is collected before the heap doubles past the parameters
// (they hold no pointers, so a collection costs little). A reload holds
// two versions for a moment; the limit is soft, so it then collects
// more often rather than fail.
func limitMemory(params int64, log zerolog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit := params + memoryHeadroom
	debug.SetMemoryLimit(limit)
	log.Debug().Int64("bytes", limit).Msg("memory limit: the parameters and 32 MiB (GOMEMLIMIT overrides it)")
}
