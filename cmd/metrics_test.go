package cmd_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// get fetches http://addr+path, or fails with the error.
func get(addr, path string) (int, string, error) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestMetricsAddrOfRealNodes: a pserver process configured as the
// manifests configure it (PSGRAPH_METRICS_ADDR and the other variables)
// serves its probes and metrics while it waits for its trainer; a trainer
// given --metrics-addr joins, and both finish.
func TestMetricsAddrOfRealNodes(t *testing.T) {
	t.Parallel()
	plan := splitDigits(t, 1)
	listen, pm, tm := freeAddr(t), freeAddr(t), freeAddr(t)
	ps := start(t, "pserver-0", []string{"PSGRAPH_TOKEN=test-token", "PSGRAPH_ROLE=pserver", "PSGRAPH_INDEX=0", "PSGRAPH_PLAN=" + plan,
		"PSGRAPH_LISTEN=" + listen, "PSGRAPH_METRICS_ADDR=" + pm}, "run")
	// wait for readiness: the pserver listens
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _, err := get(pm, "/readyz")
		if err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pserver-0 not ready within 30s (%d, %v)\n%s", code, err, ps.stderrText())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body, err := get(pm, "/healthz"); err != nil || code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz of a live pserver: %d %q %v", code, body, err)
	}
	_, m, err := get(pm, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`psgraph_ready{node="pserver-0"} 1`, `psgraph_peer_connected{node="pserver-0",peer="trainer-0"} 0`, `psgraph_steps_total{node="pserver-0"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("pserver-0 waiting for its trainer: /metrics lacks %q", want)
		}
	}
	tr := start(t, "trainer-0", []string{"PSGRAPH_TOKEN=test-token"}, "run", "--role", "trainer", "--index", "0", "--plan", plan,
		"--pservers", listen, "--steps", "30", "--metrics-addr", tm)
	for _, p := range []*proc{tr, ps} {
		if r := p.wait(t, 60*time.Second); r.code != 0 {
			t.Fatalf("%s exit %d\n%s", p.name, r.code, r.stderr)
		}
	}
	if !strings.Contains(tr.stderrText(), `serving metrics`) || !strings.Contains(tr.stderrText(), tm) {
		t.Errorf("trainer-0 does not say where it serves metrics:\n%s", tr.stderrText())
	}
}
