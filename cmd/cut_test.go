package cmd_test

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// cutProxy forwards TCP connections to a target and can close every live
// one at once, from the middle of a stream: what was in flight is lost.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	live   map[net.Conn]net.Conn
	bytes  int64 // forwarded, both directions
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, live: map[net.Conn]net.Conn{}}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.live[c] = u
			p.mu.Unlock()
			go p.pipe(c, u)
			go p.pipe(u, c)
		}
	}()
	return p
}

func (p *cutProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			p.bytes += int64(n)
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil { // io.EOF or a cut
			break
		}
	}
	dst.Close()
	src.Close()
}

// cut closes every live connection; it reports how many it closed.
func (p *cutProxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c, u := range p.live {
		c.Close()
		u.Close()
		delete(p.live, c)
		n++
	}
	return n
}

func (p *cutProxy) forwarded() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes
}

// runCutJob runs a 2x1 job of model (split with mode) whose trainers reach
// the pserver through a proxy that cuts every live connection whenever
// traffic flowed since the last cut, until the job ends. It returns the
// number of connections cut and trainer 0's summary line.
func runCutJob(t *testing.T, model, mode string, trainerArgs ...string) (int, string) {
	t.Helper()
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan")
	if r := psgraph(t, "split", model, "--trainers", "2", "--pservers", "1", "--mode", mode, "-o", plan); r.code != 0 {
		t.Fatalf("split: exit %d\n%s", r.code, r.stderr)
	}
	addr := freeAddr(t)
	px := newCutProxy(t, addr)
	env := []string{"PSGRAPH_TOKEN=test-token"}
	init := filepath.Join("testdata", "optim", "init.safetensors")
	var psArgs []string
	if strings.Contains(model, "optim") {
		psArgs = []string{"--init-from", init}
	}
	ps := start(t, "pserver-0", env, append([]string{"run", "--role", "pserver", "--index", "0", "--plan", plan, "--listen", addr}, psArgs...)...)
	var trs []*proc
	for i := 0; i < 2; i++ {
		args := append([]string{"run", "--role", "trainer", "--index", fmt.Sprint(i), "--plan", plan, "--pserver-endpoints", px.ln.Addr().String()}, trainerArgs...)
		trs = append(trs, start(t, fmt.Sprintf("trainer-%d", i), env, args...))
	}
	done := make(chan struct{})
	cuts := 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := int64(0)
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if b := px.forwarded(); b > last+4096 {
				last = b
				cuts += px.cut()
			}
		}
	}()
	var summary string
	for _, p := range append(trs, ps) {
		r := p.wait(t, 90*time.Second)
		if r.code != 0 {
			close(done)
			wg.Wait()
			t.Fatalf("%s exit %d after %d cuts\n%s\npserver-0:\n%s", p.name, r.code, cuts, r.stderr, ps.stderrText())
		}
		if p == trs[0] {
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			summary = lines[len(lines)-1]
		}
	}
	close(done)
	wg.Wait()
	if cuts < 3 {
		t.Fatalf("only %d connections were cut during the run; the test means to cut several", cuts)
	}
	t.Logf("%d connections cut mid-run; %d connect lines in the pserver's log", cuts, strings.Count(ps.stderrText(), "connected"))
	return cuts, summary
}

// Live connections between trainers and pservers cut again and again in
// the middle of a run (the same processes; whatever was in flight is
// lost): the trainers redial, each side tells the other what it received,
// the rest is written again, and the job ends where an undisturbed one
// ends (2x1 sync against local training with the combined batch).
func TestConnectionsCutMidRunEqualLocal(t *testing.T) {
	t.Parallel()
	model := filepath.Join("testdata", "optim", "mlp-adam.yaml")
	init := filepath.Join("testdata", "optim", "init.safetensors")
	local := filepath.Join(t.TempDir(), "local.safetensors")
	if r := psgraph(t, "run", "--role", "local", model, "--steps", "400", "--batch", "20", "--init-from", init, "--save", local); r.code != 0 {
		t.Fatalf("local run: exit %d\n%s", r.code, r.stderr)
	}
	dist := filepath.Join(t.TempDir(), "dist.safetensors")
	runCutJob(t, model, "sync", "--steps", "400", "--batch", "10", "--save", dist)
	equalToLocal(t, local, dist, "the cut 2x1 job")
}

// The same in async mode: the pserver waits for a trainer whose connection
// dropped (instead of stopping the job), takes a cut-off gradient up where
// it stopped, and the job trains digits as well as an undisturbed one.
func TestConnectionsCutMidRunAsync(t *testing.T) {
	t.Parallel()
	_, summary := runCutJob(t, "examples/digits-mlp.yaml", "async", "--steps", "400")
	var s struct{ Acc float64 }
	if err := json.Unmarshal([]byte(summary), &s); err != nil {
		t.Fatalf("trainer-0 summary %q: %v", summary, err)
	}
	if s.Acc < 0.95 {
		t.Fatalf("async 2x1 digits with cut connections: accuracy %.3f, want >= 0.95 (%s)", s.Acc, summary)
	}
}
