package job

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/pserver"
	"github.com/psgraph/psgraph/exec/trainer"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/metrics"
	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
)

// gateEP holds the Send of step `at` until release is closed, after
// telling reached.
type gateEP struct {
	transport.Endpoint
	at               int64
	once             sync.Once
	reached, release chan struct{}
}

func (e *gateEP) Send(ctx context.Context, to transport.NodeID, step int64, v string, dt transport.DType, payload []byte) error {
	if step == e.at {
		e.once.Do(func() { close(e.reached) })
		select {
		case <-e.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return e.Endpoint.Send(ctx, to, step, v, dt, payload)
}

// scrape reads a node's /metrics into "name{labels}" -> value, labels
// sorted as Prometheus writes them.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + metrics.MetricsPath)
	if err != nil {
		t.Fatalf("scraping %s: %v", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping %s: %s", addr, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("%s: bad sample %q", addr, line)
		}
		out[line[:i]] = v
	}
	return out
}

func probe(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("probing %s%s: %v", addr, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestMetricsOfRunning2x2Job runs digits 2x2 (sync) over loopback TCP, each
// node serving its metrics, holds trainer-0 at step 50 and scrapes every
// node: the step counters stand where the job is, the bytes per peer are
// those of the steps done, the probes answer; then it lets the job finish
// and finds the counters moved to the end and the bytes per peer adding up
// to each node's summary, peer by peer as docs/runtime.md's table says.
func TestMetricsOfRunning2x2Job(t *testing.T) {
	const steps, gate = 120, 50
	g, err := dsl.Load("../../examples/digits-mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := partition.Split(g, partition.Options{Trainers: 2, PServers: 2, Mode: partition.Sync, MinBlockSize: partition.DefaultMinBlockSize})
	if err != nil {
		t.Fatal(err)
	}
	j := &Job{Trainer: plan.Trainer, PServers: plan.PServers, Trainers: 2, Params: plan.Info.ServedParams()}
	batch := plan.Trainer.Batch()
	rej := &rejections{}
	eps := jobEndpoints(t, "tcp", j, batch, rej)

	began := time.Now() // before any node's metrics start
	servers := map[transport.NodeID]*metrics.Server{}
	for id := range eps {
		s, err := metrics.Listen("127.0.0.1:0", metrics.New(id.String()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		servers[id] = s
	}
	addr := func(id transport.NodeID) string { return servers[id].Addr().String() }
	for id := range eps {
		if code, body := probe(t, addr(id), metrics.ReadyPath); code != http.StatusServiceUnavailable {
			t.Errorf("%s is ready (%d %q) before it joined the job", id, code, body)
		}
	}

	ckDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g0 := &gateEP{Endpoint: eps[transport.Trainer(0)], at: gate, reached: make(chan struct{}), release: make(chan struct{})}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	sums := make([]*trainer.Summary, 2)
	psums := make([]*pserver.ServeSummary, 2)
	for i, id := range j.PServerIDs() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			so := pserver.ServeOptions{Log: zerolog.Nop(), ResumeStep: -1, Prom: servers[id].Node()}
			if i == 0 { // pserver-0 checkpoints, pserver-1 does not
				so.Checkpoint = &modelfile.Checkpointer{Dir: ckDir, Every: 20, Node: id.String(), Model: j.PServers[i].Name}
			}
			s, err := j.RunPServer(ctx, i, eps[id], so)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", id, err)
				cancel()
			}
			psums[i] = s
		}()
	}
	for i, id := range j.TrainerIDs() {
		var ep transport.Endpoint = eps[id]
		if i == 0 {
			ep = g0
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := j.RunTrainer(ctx, i, ep, trainer.RunOptions{Steps: steps, Batch: batch, Log: zerolog.Nop(), StartStep: -1, Prom: servers[id].Node()})
			if err != nil {
				errs <- fmt.Errorf("%s: %w", id, err)
				cancel()
			}
			sums[i] = s
		}()
	}
	select {
	case <-g0.reached:
	case err := <-errs:
		t.Fatal(err)
	}

	// The job stands at trainer-0's step 50.
	t0 := transport.Trainer(0)
	m := scrape(t, addr(t0))
	if got := m[`psgraph_steps_total{node="trainer-0"}`]; got != gate {
		t.Errorf("trainer-0 held in step %d reports %v steps, want %d", gate, got, gate)
	}
	if got := m[`psgraph_step_seconds_count{node="trainer-0"}`]; got != gate {
		t.Errorf("trainer-0's step time histogram has %v observations, want %d", got, gate)
	}
	for p, load := range plan.Info.Load {
		ps := transport.PServer(p)
		peer := fmt.Sprintf(`{node="trainer-0",peer="%s"}`, ps)
		// gate gradients and a position up (positionSpec.Bytes); gate+1 values down
		// (the pserver's 8-byte resume message arrives too, but a trainer
		// of a fresh job never takes it: it is read only on a rejoin)
		if got, want := m["psgraph_peer_sent_bytes_total"+peer], float64(gate*load.Bytes+comm.PositionSpec.Bytes); got != want {
			t.Errorf("at step %d trainer-0 sent %v bytes to %s, want %v", gate, got, ps, want)
		}
		if got, want := m["psgraph_peer_recv_bytes_total"+peer], float64((gate+1)*load.Bytes); got != want {
			t.Errorf("at step %d trainer-0 received %v bytes from %s, want %v", gate, got, ps, want)
		}
		if m["psgraph_peer_connected"+peer] != 1 {
			t.Errorf("trainer-0 reports no live connection to %s mid-run", ps)
		}
		if got := m["psgraph_peer_reconnects_total"+peer]; got != 0 {
			t.Errorf("trainer-0 reports %v reconnects to %s in a clean run", got, ps)
		}
	}
	for i := range 2 {
		ps := transport.PServer(i)
		pm := scrape(t, addr(ps))
		// step 49 counted (or about to be), step 50 waits for trainer-0
		if got := pm[fmt.Sprintf(`psgraph_steps_total{node="%s"}`, ps)]; got < gate-1 || got > gate+1 {
			t.Errorf("%s reports %v steps while trainer-0 is held at %d", ps, got, gate)
		}
		if got := pm[fmt.Sprintf(`psgraph_pserver_update_seconds_count{node="%s"}`, ps)]; got < gate {
			t.Errorf("%s timed %v part-steps, want at least %d", ps, got, gate)
		}
		if got := pm[fmt.Sprintf(`psgraph_peer_recv_bytes_total{node="%s",peer="trainer-1"}`, ps)]; got < float64(gate*plan.Info.Load[i].Bytes) {
			t.Errorf("%s received %v bytes from trainer-1 by step %d, want at least %d", ps, got, gate, gate*plan.Info.Load[i].Bytes)
		}
		// pserver-0 wrote its checkpoint of step 40 before it served step
		// 41; pserver-1 writes none
		wantCk := map[int]float64{0: 40, 1: -1}[i]
		if got := pm[fmt.Sprintf(`psgraph_checkpoint_step{node="%s"}`, ps)]; got != wantCk {
			t.Errorf("%s reports checkpoint step %v at step %d, want %v", ps, got, gate, wantCk)
		}
		if age := pm[fmt.Sprintf(`psgraph_checkpoint_age_seconds{node="%s"}`, ps)]; age < 0 || age > time.Since(began).Seconds() {
			t.Errorf("%s reports a checkpoint age of %vs, %v after the job began", ps, age, time.Since(began))
		}
		for path, want := range map[string]string{metrics.LivePath: "ok", metrics.ReadyPath: "ready"} {
			if code, body := probe(t, addr(ps), path); code != http.StatusOK || body != want {
				t.Errorf("%s%s on a live pserver: %d %q, want 200 %q", ps, path, code, body, want)
			}
		}
	}
	if code, _ := probe(t, addr(t0), metrics.ReadyPath); code != http.StatusOK {
		t.Errorf("trainer-0 mid-run is not ready: %d", code)
	}

	close(g0.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if rej.String() != "" {
		t.Fatalf("rejected: %s", rej)
	}
	// The counters moved to the end, and the bytes per peer add up to the
	// summaries, which count every payload byte once in a clean run (a
	// trainer's summary also counts the resume messages it never took).
	for i, id := range j.TrainerIDs() {
		m := scrape(t, addr(id))
		if got := m[fmt.Sprintf(`psgraph_steps_total{node="%s"}`, id)]; got != steps {
			t.Errorf("%s finished with %v steps counted, want %d", id, got, steps)
		}
		var sent, recv float64
		for p := range 2 {
			peer := fmt.Sprintf(`{node="%s",peer="%s"}`, id, transport.PServer(p))
			sent += m["psgraph_peer_sent_bytes_total"+peer]
			recv += m["psgraph_peer_recv_bytes_total"+peer]
		}
		if sent != float64(sums[i].SentBytes) || recv+8*2 != float64(sums[i].RecvBytes) {
			t.Errorf("%s: bytes per pserver add up to %v sent, %v received; its summary says %d, %d (with two untaken 8-byte resume messages)", id, sent, recv, sums[i].SentBytes, sums[i].RecvBytes)
		}
	}
	for i, id := range j.PServerIDs() {
		m := scrape(t, addr(id))
		if got := m[fmt.Sprintf(`psgraph_steps_total{node="%s"}`, id)]; got != steps {
			t.Errorf("%s finished with %v steps counted, want %d", id, got, steps)
		}
		if got, want := m[fmt.Sprintf(`psgraph_checkpoint_step{node="%s"}`, id)], map[int]float64{0: steps, 1: -1}[i]; got != want {
			t.Errorf("%s ended with checkpoint step %v, want %v", id, got, want)
		}
		var sent, recv float64
		for tr := range 2 {
			peer := fmt.Sprintf(`{node="%s",peer="%s"}`, id, transport.Trainer(tr))
			s, r := m["psgraph_peer_sent_bytes_total"+peer], m["psgraph_peer_recv_bytes_total"+peer]
			// (S+1)·B_p + 8 down to each trainer, S·B_p + the position up from it
			if b := plan.Info.Load[i].Bytes; s != float64((steps+1)*b+8) || r != float64(steps*b+comm.PositionSpec.Bytes) {
				t.Errorf("%s moved %v bytes to and %v from trainer-%d, want %d and %d", id, s, r, tr, (steps+1)*b+8, steps*b+comm.PositionSpec.Bytes)
			}
			sent, recv = sent+s, recv+r
		}
		if sent != float64(psums[i].SentBytes) || recv != float64(psums[i].RecvBytes) {
			t.Errorf("%s: bytes per trainer add up to %v sent, %v received; its summary says %d, %d", id, sent, recv, psums[i].SentBytes, psums[i].RecvBytes)
		}
	}
}
