package cmd_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/psgraph/psgraph/exec/tensor"
)

// summary parses the JSON object on the last line of stdout.
func summary(t *testing.T, r result) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil {
		t.Fatalf("last stdout line is not a JSON summary: %v\nstdout:\n%s\nstderr:\n%s", err, r.stdout, r.stderr)
	}
	return m
}

func TestTrainSyncAndAsyncOnDigits(t *testing.T) {
	for _, mode := range []string{"sync", "async"} {
		t.Run(mode, func(t *testing.T) {
			r := psgraph(t, "train", "examples/digits-mlp.yaml", "--trainers", "2", "--pservers", "2", "--mode", mode, "--steps", "400", "--log-every", "100")
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			s := summary(t, r)
			if acc, _ := s["acc"].(float64); acc < 0.95 {
				t.Errorf("%s 2x2 digits accuracy %v, want >= 0.95", mode, s["acc"])
			}
			if s["role"] != "trainer-0" {
				t.Errorf("summary of %v, want trainer-0's", s["role"])
			}
			for _, role := range []string{"pserver-0 | ", "pserver-1 | ", "trainer-0 | ", "trainer-1 | "} {
				if !strings.Contains(r.stderr, role) {
					t.Errorf("stderr has no line prefixed %q", role)
				}
			}
		})
	}
}

// freeAddr returns a loopback address nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type proc struct {
	name string
	cmd  *exec.Cmd
	out  bytes.Buffer
	err  lockedBuffer
	done chan error
}

// lockedBuffer is a bytes.Buffer safe to read while the process writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (p *proc) stderrText() string { return p.err.String() }

func start(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	return startCmd(t, name, env, binary, args...)
}

// startCmd starts any program (e.g. ip netns exec psgraph ...) as a proc.
func startCmd(t *testing.T, name string, env []string, program string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(program, args...), done: make(chan error, 1)}
	p.cmd.Dir = ".."
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *proc) wait(t *testing.T, within time.Duration) result {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // for Cleanup
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return result{code, p.out.String(), p.err.String()}
	case <-time.After(within):
		t.Fatalf("%s did not exit within %v\nstderr:\n%s", p.name, within, p.err.String())
	}
	return result{}
}

// Roles started by hand, trainers first: they retry until the pservers
// listen. The pservers exit 0 by themselves once both trainers are done,
// and N trainers with batch b end where one local node with batch N*b
// ends (same --init-from).
func TestRolesByHandReverseOrderEqualLocal(t *testing.T) {
	for _, opt := range []string{"sgd", "adam"} {
		t.Run(opt, func(t *testing.T) {
			dir := t.TempDir()
			model := filepath.Join("testdata", "optim", "mlp-"+opt+".yaml")
			init := filepath.Join("testdata", "optim", "init.safetensors")
			local := filepath.Join(dir, "local.safetensors")
			if r := psgraph(t, "run", "--role", "local", model, "--steps", "40", "--batch", "20", "--init-from", init, "--save", local); r.code != 0 {
				t.Fatalf("local run: exit %d\n%s", r.code, r.stderr)
			}
			plan := filepath.Join(dir, "plan")
			if r := psgraph(t, "split", model, "--trainers", "2", "--pservers", "2", "-o", plan); r.code != 0 {
				t.Fatalf("split: exit %d\n%s", r.code, r.stderr)
			}
			addrs := []string{freeAddr(t), freeAddr(t)}
			env := []string{"PSGRAPH_TOKEN=test-token"}
			dist := filepath.Join(dir, "dist.safetensors")
			t0 := start(t, "trainer-0", env, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pservers", strings.Join(addrs, ","), "--steps", "40", "--batch", "10", "--save", dist)
			// trainer 1 and the pservers configured through the environment
			t1 := start(t, "trainer-1", append(env, "PSGRAPH_ROLE=trainer", "PSGRAPH_INDEX=1", "PSGRAPH_PLAN="+plan, "PSGRAPH_PSERVERS="+strings.Join(addrs, ",")), "run", "--steps", "40", "--batch", "10")
			var ps []*proc
			for i, a := range addrs {
				ps = append(ps, start(t, fmt.Sprintf("pserver-%d", i), append(env, "PSGRAPH_LISTEN="+a), "run", "--role", "pserver", "--index", fmt.Sprint(i), "--plan", plan, "--init-from", init))
			}
			for _, p := range append([]*proc{t0, t1}, ps...) {
				if r := p.wait(t, 60*time.Second); r.code != 0 {
					t.Fatalf("%s exit %d\n%s", p.name, r.code, r.stderr)
				}
			}
			equalToLocal(t, local, dist, "2x2 sync")
		})
	}
}

// equalToLocal checks that the job's saved parameters match the local
// run's within 1e-4 (relative, per tensor).
func equalToLocal(t *testing.T, local, dist, job string) {
	t.Helper()
	a, b := readTensors(t, local), readTensors(t, dist)
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("local saved %d tensors, the job %d", len(a), len(b))
	}
	for name, x := range a {
		if d := rel(x, b[name]); d > 1e-4 {
			t.Errorf("%s: relative difference %.2g between %s and local with the combined batch, want <= 1e-4", name, d, job)
		}
	}
}

// readTensors reads a safetensors file (F32 only) without psgraph's reader,
// so the test checks the file format too.
func readTensors(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16 | int(b[3])<<24
	var header map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for name, raw := range header {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			Offsets [2]int `json:"data_offsets"`
		}
		json.Unmarshal(raw, &e)
		data := b[8+n+e.Offsets[0] : 8+n+e.Offsets[1]]
		out[name] = append([]float32(nil), tensor.F32View(data)...)
	}
	return out
}

func rel(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var num, den float64
	for i := range a {
		d := float64(a[i] - b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / math.Max(den, 1e-30))
}

// A failing child stops the job: train exits non-zero with its error and
// no child outlives it.
func TestTrainStopsWhenAChildFails(t *testing.T) {
	// A missing --init-from file makes both pservers fail at start.
	r := psgraph(t, "train", "examples/digits-mlp.yaml", "--trainers", "2", "--pservers", "2", "--init-from", "does-not-exist.safetensors")
	if r.code == 0 {
		t.Fatal("train succeeded with a missing --init-from file")
	}
	if !strings.Contains(r.stderr, "pserver-") || !strings.Contains(r.stderr, "does-not-exist.safetensors") {
		t.Errorf("stderr does not name the failed pserver and its error:\n%s", r.stderr)
	}
}
