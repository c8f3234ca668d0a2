package cmd_test

import (
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

// Live connections between trainers and pservers cut again and again in
// the middle of a run (the same processes; whatever was in flight is
// lost): the trainers redial, each side tells the other what it received,
// the rest is written again, and the job ends where an undisturbed one
// ends (2x1 sync against local training with the combined batch).
func TestConnectionsCutMidRunEqualLocal(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join("testdata", "optim", "mlp-adam.yaml")
	init := filepath.Join("testdata", "optim", "init.safetensors")
	const steps = "400"
	local := filepath.Join(dir, "local.safetensors")
	if r := psgraph(t, "run", "--role", "local", model, "--steps", steps, "--batch", "20", "--init-from", init, "--save", local); r.code != 0 {
		t.Fatalf("local run: exit %d\n%s", r.code, r.stderr)
	}
	plan := filepath.Join(dir, "plan")
	if r := psgraph(t, "split", model, "--trainers", "2", "--pservers", "1", "-o", plan); r.code != 0 {
		t.Fatalf("split: exit %d\n%s", r.code, r.stderr)
	}
	addr := freeAddr(t)
	px := newCutProxy(t, addr)
	env := []string{"PSGRAPH_TOKEN=test-token"}
	dist := filepath.Join(dir, "dist.safetensors")
	ps := start(t, "pserver-0", env, "run", "--role", "pserver", "--index", "0", "--plan", plan, "--listen", addr, "--init-from", init)
	var trs []*proc
	for i := 0; i < 2; i++ {
		args := []string{"run", "--role", "trainer", "--index", fmt.Sprint(i), "--plan", plan, "--pservers", px.ln.Addr().String(), "--steps", steps, "--batch", "10"}
		if i == 0 {
			args = append(args, "--save", dist)
		}
		trs = append(trs, start(t, fmt.Sprintf("trainer-%d", i), env, args...))
	}
	// Cut whenever traffic flowed since the last cut, until the job ends.
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
	for _, p := range append(trs, ps) {
		if r := p.wait(t, 90*time.Second); r.code != 0 {
			close(done)
			wg.Wait()
			t.Fatalf("%s exit %d after %d cuts\n%s", p.name, r.code, cuts, r.stderr)
		}
	}
	close(done)
	wg.Wait()
	if cuts < 3 {
		t.Fatalf("only %d connections were cut during the run; the test means to cut several", cuts)
	}
	t.Logf("%d connections cut mid-run; %d connect lines in the pserver's log", cuts, strings.Count(ps.stderrText(), "connected"))
	equalToLocal(t, local, dist, "the cut 2x1 job")
}
