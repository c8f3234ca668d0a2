// Package metrics exports a node's progress to Prometheus: steps and their
// time, the payload bytes it moved with each peer, its connections, a
// pserver's update time and the age of its newest checkpoint. It also
// serves the liveness and readiness endpoints Kubernetes probes.
//
// Every method of a nil *Node does nothing, so the executor calls them
// unconditionally; a step costs a counter increment and a histogram
// observation, atomics only, and no allocation (BenchmarkStep).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Paths the server answers.
const (
	MetricsPath = "/metrics"
	// LivePath answers 200 while the process serves HTTP (liveness).
	LivePath = "/healthz"
	// ReadyPath answers 200 once the node is part of its job: a pserver
	// listens, a trainer reached every pserver (readiness); 503 before.
	ReadyPath = "/readyz"
)

// stepBuckets cover 100 µs to ~3 min per step.
var stepBuckets = prometheus.ExponentialBuckets(100e-6, 2.5, 16)

// Node holds the metrics of one node of a job (or a local run).
type Node struct {
	reg   *prometheus.Registry
	start time.Time
	name  string

	steps      prometheus.Counter
	stepTime   prometheus.Histogram
	updateTime prometheus.Histogram
	sent, recv *prometheus.CounterVec
	reconnects *prometheus.CounterVec

	ready atomic.Bool
	// checkpoint: the step and time (UnixNano) of the newest one; step -1
	// while there is none.
	ckStep atomic.Int64
	ckTime atomic.Int64

	mu  sync.Mutex
	eps []*Endpoint
}

// New returns the metrics of node ("trainer-0", "pserver-1", "local"); every
// series carries it as the label node.
func New(node string) *Node {
	n := &Node{reg: prometheus.NewRegistry(), start: time.Now(), name: node}
	n.ckStep.Store(-1)
	c := prometheus.Labels{"node": node}
	n.steps = prometheus.NewCounter(prometheus.CounterOpts{Name: "psgraph_steps_total", ConstLabels: c,
		Help: "Training steps this node completed (a pserver: the steps its first parameter block's loop served)."})
	n.stepTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "psgraph_step_seconds", ConstLabels: c, Buckets: stepBuckets,
		Help: "Wall time of one training step of a trainer or local run: feed, flush, forward, backward, and the waits for the pservers' parameters."})
	n.updateTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "psgraph_pserver_update_seconds", ConstLabels: c, Buckets: stepBuckets,
		Help: "Wall time of one step of one pserver part (a parameter block's loop): waiting for the step's gradients from every trainer (one, async), the optimizer update and sending the new values."})
	n.sent = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "psgraph_peer_sent_bytes_total", ConstLabels: c,
		Help: "Payload bytes this node queued to a peer (tensors and psgraph's position and resume messages; counted once per Send: the transport writing it again after a reconnect does not count, psgraph re-sending it to a restarted peer does)."}, []string{"peer"})
	n.recv = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "psgraph_peer_recv_bytes_total", ConstLabels: c,
		Help: "Payload bytes of the messages from a peer that this node's program took (a trainer of a fresh job leaves the pserver's 8-byte resume message untaken)."}, []string{"peer"})
	n.reconnects = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "psgraph_peer_reconnects_total", ConstLabels: c,
		Help: "Times a peer's connection came back after it was seen lost (sampled every 100ms: a shorter blip may be missed; a restarted peer also counts in psgraph_peer_restarts_total)."}, []string{"peer"})
	n.reg.MustRegister(n.steps, n.stepTime, n.updateTime, n.sent, n.recv, n.reconnects,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "psgraph_checkpoint_age_seconds", ConstLabels: c,
			Help: "Seconds since this node wrote (or restored) its newest checkpoint; since it started while it has none."},
			n.checkpointAge),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "psgraph_checkpoint_step", ConstLabels: c,
			Help: "Step of this node's newest checkpoint, -1 while it has none."},
			func() float64 { return float64(n.ckStep.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "psgraph_ready", ConstLabels: c,
			Help: "1 once the node is part of its job (a pserver listens, a trainer reached its pservers)."},
			func() float64 { return b2f(n.ready.Load()) }),
		&connCollector{n: n,
			up: prometheus.NewDesc("psgraph_peer_connected", "1 while this node has a live connection to the peer.", []string{"peer"}, c),
			restarts: prometheus.NewDesc("psgraph_peer_restarts_total",
				"Times the peer came back as a new process (incarnation): its old messages were dropped.", []string{"peer"}, c)},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return n
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Registry is where the node's collectors are registered.
func (n *Node) Registry() *prometheus.Registry { return n.reg }

// Step records one completed training step that took d.
func (n *Node) Step(d time.Duration) {
	if n == nil {
		return
	}
	n.steps.Inc()
	n.stepTime.Observe(d.Seconds())
}

// ServedStep records that a pserver's first part served one more step.
func (n *Node) ServedStep() {
	if n == nil {
		return
	}
	n.steps.Inc()
}

// Update records one step of one pserver part that took d.
func (n *Node) Update(d time.Duration) {
	if n == nil {
		return
	}
	n.updateTime.Observe(d.Seconds())
}

// Checkpointed records that the node's checkpoint of step was written (or
// restored) at t.
func (n *Node) Checkpointed(step int64, t time.Time) {
	if n == nil {
		return
	}
	n.ckTime.Store(t.UnixNano())
	n.ckStep.Store(step)
}

func (n *Node) checkpointAge() float64 {
	since := n.start
	if n.ckStep.Load() >= 0 {
		since = time.Unix(0, n.ckTime.Load())
	}
	return math.Max(0, time.Since(since).Seconds())
}

// SetReady marks the node ready (or not) for the readiness probe.
func (n *Node) SetReady(ok bool) {
	if n == nil {
		return
	}
	n.ready.Store(ok)
}

// Handler serves /metrics, /healthz and /readyz.
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(MetricsPath, promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{Registry: n.reg}))
	mux.HandleFunc(LivePath, func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc(ReadyPath, func(w http.ResponseWriter, _ *http.Request) {
		if !n.ready.Load() {
			http.Error(w, "not ready: the node has not joined its job yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// Server is a node's metrics and health endpoint.
type Server struct {
	node *Node
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// Listen serves n's Handler on addr (host:port; port 0 picks one).
func Listen(addr string, n *Node) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w (pick a free port, or leave --metrics-addr empty to serve no metrics)", addr, err)
	}
	s := &Server{node: n, ln: ln, srv: &http.Server{Handler: n.Handler(), ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.srv.Serve(ln)
	}()
	return s, nil
}

// Node is the node whose metrics s serves; nil for a nil Server (no
// --metrics-addr), which every Node method accepts.
func (s *Server) Node() *Node {
	if s == nil {
		return nil
	}
	return s.node
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the server and the node's connection watchers.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	s.node.stopWatchers()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	if errors.Is(err, context.DeadlineExceeded) {
		err = s.srv.Close()
	}
	return err
}

func (n *Node) stopWatchers() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, e := range n.eps {
		e.stop()
	}
}

// connCollector reports each watched endpoint's peers at scrape time.
type connCollector struct {
	n            *Node
	up, restarts *prometheus.Desc
}

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.up; ch <- c.restarts }

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	c.n.mu.Lock()
	eps := append([]*Endpoint(nil), c.n.eps...)
	c.n.mu.Unlock()
	for _, e := range eps {
		for _, p := range e.order {
			ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, b2f(e.connected(p)), p.String())
			r, _ := e.Endpoint.Restarts(p)
			ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.CounterValue, float64(r), p.String())
		}
	}
}
