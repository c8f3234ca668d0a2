package cmd_test

import (
	"bytes"
	bin "encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/psgraph/psgraph/exec/launch"
	"github.com/psgraph/psgraph/exec/tensor"
	"github.com/psgraph/psgraph/internal/testfix"
	"github.com/psgraph/psgraph/partition"
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
	t.Parallel()
	for _, mode := range []string{"sync", "async"} {
		t.Run(mode, func(t *testing.T) {
			plan := t.TempDir()
			r := psgraph(t, "train", "examples/digits-mlp.yaml", "--trainers", "2", "--pservers", "2", "--mode", mode, "--steps", "400", "--log-every", "100", "--plan-dir", plan)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			s := summary(t, r)
			// train prints trainer 0's summary, with its traffic.
			want := planTraffic(t, plan, 400)
			if bytesOf(s, "sent_bytes") != want.trainerSent || bytesOf(s, "recv_bytes") != want.trainerRecv {
				t.Errorf("trainer-0 summary %v: want sent_bytes %d, recv_bytes %d", s, want.trainerSent, want.trainerRecv)
			}
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

// plannedTraffic is the payload bytes a fresh job moves, from its plan:
// per step a trainer sends every block's gradient and receives every
// block (and step 0's parameters before the first step); each trainer and
// pserver exchange a position and a resume message (docs/runtime.md).
type plannedTraffic struct {
	trainerSent, trainerRecv int64
	pserverSent, pserverRecv []int64
}

func planTraffic(t *testing.T, dir string, steps int64) plannedTraffic {
	t.Helper()
	const position, resume = 40, 8 // the control messages' sizes (docs/runtime.md)
	p, err := partition.ReadPlan(dir)
	if err != nil {
		t.Fatal(err)
	}
	n, m := int64(p.Info.Trainers), int64(p.Info.PServers)
	blocks := make([]int64, m)
	var all int64
	for _, pl := range p.Info.Placement {
		blocks[pl.PServer] += int64(pl.Bytes)
		all += int64(pl.Bytes)
	}
	if all == 0 {
		t.Fatalf("plan %s places no parameter on a pserver", dir)
	}
	out := plannedTraffic{trainerSent: steps*all + m*position, trainerRecv: (steps+1)*all + m*resume}
	for _, b := range blocks {
		out.pserverSent = append(out.pserverSent, n*((steps+1)*b+resume))
		out.pserverRecv = append(out.pserverRecv, n*(steps*b+position))
	}
	return out
}

// bytesOf reads an integer field of a JSON summary (-1 when absent).
func bytesOf(s map[string]any, key string) int64 {
	v, ok := s[key].(float64)
	if !ok {
		return -1
	}
	return int64(v)
}

// Every node of a 2x2 job over TCP (real processes) reports in its
// summary the payload bytes the plan implies; what the pservers sent is
// what the trainers received, and each connection carried more than its
// payloads (frame headers, yamux).
func TestNodeSummariesCountTraffic(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan")
	if r := psgraph(t, "split", "examples/digits-mlp.yaml", "--trainers", "2", "--pservers", "2", "-o", plan); r.code != 0 {
		t.Fatalf("split: exit %d\n%s", r.code, r.stderr)
	}
	const steps = 30
	addrs := strings.Join([]string{freeAddr(t), freeAddr(t)}, ",")
	env := []string{"PSGRAPH_TOKEN=test-token"}
	var procs []*proc
	for i, a := range strings.Split(addrs, ",") {
		procs = append(procs, start(t, fmt.Sprintf("pserver-%d", i), env, "run", "--role", "pserver", "--index", fmt.Sprint(i), "--plan", plan, "--listen", a))
	}
	for i := 0; i < 2; i++ {
		procs = append(procs, start(t, fmt.Sprintf("trainer-%d", i), env, "run", "--role", "trainer", "--index", fmt.Sprint(i), "--plan", plan, "--pserver-endpoints", addrs, "--steps", fmt.Sprint(steps)))
	}
	want := planTraffic(t, plan, steps)
	sent, recv := map[string]int64{}, map[string]int64{} // by role
	for i, p := range procs {
		r := p.wait(t, 60*time.Second)
		if r.code != 0 {
			t.Fatalf("%s exit %d\n%s", p.name, r.code, r.stderr)
		}
		s := summary(t, r)
		role, ws, wr := "trainer", want.trainerSent, want.trainerRecv
		if i < 2 {
			role, ws, wr = "pserver", want.pserverSent[i], want.pserverRecv[i]
		}
		gs, gr := bytesOf(s, "sent_bytes"), bytesOf(s, "recv_bytes")
		if gs != ws || gr != wr {
			t.Errorf("%s: sent_bytes %d, recv_bytes %d; the plan says %d and %d", p.name, gs, gr, ws, wr)
		}
		if bytesOf(s, "wire_sent_bytes") <= gs || bytesOf(s, "wire_recv_bytes") <= gr {
			t.Errorf("%s: wire bytes not above the payload bytes: %v", p.name, s)
		}
		sent[role], recv[role] = sent[role]+gs, recv[role]+gr
	}
	if sent["pserver"] != recv["trainer"] || sent["trainer"] != recv["pserver"] {
		t.Errorf("pservers sent %d and received %d; trainers received %d and sent %d", sent["pserver"], recv["pserver"], recv["trainer"], sent["trainer"])
	}
}

// freeAddr returns a loopback address nobody listens on (testfix.FreeAddr).
func freeAddr(t *testing.T) string {
	t.Helper()
	return testfix.FreeAddr(t)
}

type proc struct {
	name string
	cmd  *exec.Cmd
	peak *launch.Peak // its own peak memory, once it exited
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

// quit sends p SIGQUIT, which makes a Go process print every goroutine's
// stack (what it waits on, for a hang seen once in a loaded run), and
// waits up to 5 s for it to exit.
func (p *proc) quit() {
	p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(5 * time.Second):
	}
}

// dumpOnFailure has a failed test show what each of ps was doing: a
// process still running is sent SIGQUIT (every goroutine's stack), and
// the last lines of each one's stderr but its step logs (JSON "train"
// lines) are logged. For
// a hang seen once in hundreds of runs, whose cause may be any role's.
func dumpOnFailure(t *testing.T, ps ...*proc) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, p := range ps {
			select {
			case err := <-p.done:
				p.done <- err
			default:
				p.quit()
			}
			var keep []string
			for _, l := range strings.Split(p.err.String(), "\n") {
				if !strings.Contains(l, `"message":"train"`) {
					keep = append(keep, l)
				}
			}
			if dir := os.Getenv("PSGRAPH_TEST_DUMP"); dir != "" { // the whole of it, to a file
				f := filepath.Join(dir, fmt.Sprintf("%s-%d-%s.log", t.Name(), p.cmd.Process.Pid, p.name))
				os.MkdirAll(filepath.Dir(f), 0o755)
				os.WriteFile(f, []byte(p.err.String()), 0o644)
			}
			t.Logf("%s's stderr, its step logs left out (last 150 lines; PSGRAPH_TEST_DUMP=DIR keeps all):\n%s", p.name, strings.Join(keep[max(0, len(keep)-150):], "\n"))
		}
	})
}

func start(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	return startCmd(t, name, env, binary, args...)
}

// startCmd starts any program (e.g. ip netns exec psgraph ...) as a proc.
func startCmd(t *testing.T, name string, env []string, program string, args ...string) *proc {
	t.Helper()
	return startCmdIn(t, name, env, nil, program, args...)
}

// startCmdIn is startCmd with standard input (nil: none).
func startCmdIn(t *testing.T, name string, env []string, stdin io.Reader, program string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(program, args...), done: make(chan error, 1)}
	p.cmd.Dir = ".."
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	p.cmd.Stdin = stdin
	var err error
	if p.peak, err = launch.Measure(p.cmd); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		p.peak.Bytes() // closes its pipe
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
		p.quit()
		t.Fatalf("%s did not exit within %v (sent SIGQUIT for its goroutines)\nstderr:\n%s", p.name, within, p.err.String())
	}
	return result{}
}

// Roles started by hand, trainers first: they retry until the pservers
// listen. The pservers exit 0 by themselves once both trainers are done,
// and N trainers with batch b end where one local node with batch N*b
// ends (same --init-from).
func TestRolesByHandReverseOrderEqualLocal(t *testing.T) {
	t.Parallel()
	// adam-warmup-cosine: a schedule run on the pservers; adam-clip-norm:
	// the pservers' partial norms exchanged through the trainers over TCP.
	for _, opt := range []string{"sgd", "adam", "adam-warmup-cosine", "adam-clip-norm"} {
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
			t0 := start(t, "trainer-0", env, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pserver-endpoints", strings.Join(addrs, ","), "--steps", "40", "--batch", "10", "--save", dist)
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

// More pservers than parameter blocks (the digits MLP has 4): the
// pservers that hold nothing stay until the trainers are done, so the job
// ends as any other does. Before, they said "every trainer is done" at
// once and exited; every trainer then lost them, tried to reconnect until
// --connect-timeout (a minute by default) and only then finished, still
// exit 0. Here the trainers get 3 s to reconnect, and no trainer or
// pserver may have lost a peer.
func TestMorePServersThanBlocksEndQuietly(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ trainers, pservers int }{{1, 6}, {4, 8}} {
		t.Run(fmt.Sprintf("%dx%d", c.trainers, c.pservers), func(t *testing.T) {
			plan := filepath.Join(t.TempDir(), "plan")
			r := psgraph(t, "split", "examples/digits-mlp.yaml", "--trainers", fmt.Sprint(c.trainers), "--pservers", fmt.Sprint(c.pservers), "-o", plan)
			if r.code != 0 || !strings.Contains(r.stdout+r.stderr, "hold nothing") {
				t.Fatalf("split: exit %d, want a warning that some pservers hold nothing\n%s%s", r.code, r.stdout, r.stderr)
			}
			env := []string{"PSGRAPH_TOKEN=test-token"}
			var addrs []string
			var procs []*proc
			for i := range c.pservers {
				addrs = append(addrs, freeAddr(t))
				procs = append(procs, start(t, fmt.Sprintf("pserver-%d", i), env, "run", "--role", "pserver", "--index", fmt.Sprint(i), "--plan", plan, "--listen", addrs[i]))
			}
			for i := range c.trainers {
				procs = append(procs, start(t, fmt.Sprintf("trainer-%d", i), env, "run", "--role", "trainer", "--index", fmt.Sprint(i), "--plan", plan,
					"--pserver-endpoints", strings.Join(addrs, ","), "--steps", "200", "--connect-timeout", "3s"))
			}
			for _, p := range procs {
				r := p.wait(t, 2*time.Minute)
				if r.code != 0 {
					t.Fatalf("%s exit %d\n%s", p.name, r.code, r.stderr)
				}
				for _, bad := range []string{"connection lost", "reconnecting", "giving up", "after the last step", "lost a trainer"} {
					if strings.Contains(r.stderr, bad) {
						t.Errorf("%s logged %q: a peer went away before the job ended\n%s", p.name, bad, r.stderr)
					}
				}
			}
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
	t.Parallel()
	// An --init-from file of another model (one tensor, x, none of
	// digits-mlp's parameters) makes both pservers fail at start; train
	// itself reads only the file's header (its normalization statistics:
	// none).
	other := filepath.Join(t.TempDir(), "other-model.safetensors")
	header := `{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`
	for len(header)%8 != 0 {
		header += " "
	}
	file := append(bin.LittleEndian.AppendUint64(nil, uint64(len(header))), header...)
	if err := os.WriteFile(other, append(file, 0, 0, 128, 63), 0o644); err != nil {
		t.Fatal(err)
	}
	r := psgraph(t, "train", "examples/digits-mlp.yaml", "--trainers", "2", "--pservers", "2", "--init-from", other)
	if r.code == 0 {
		t.Fatal("train succeeded with another model's --init-from file")
	}
	if !strings.Contains(r.stderr, "pserver-") || !strings.Contains(r.stderr, "other-model.safetensors") {
		t.Errorf("stderr does not name the failed pserver and its error:\n%s", r.stderr)
	}
	// A missing file is refused before any child starts.
	r = psgraph(t, "train", "examples/digits-mlp.yaml", "--trainers", "2", "--pservers", "2", "--init-from", "does-not-exist.safetensors")
	if r.code != 1 || !strings.Contains(r.stderr, "--init-from does-not-exist.safetensors: no such file; give the path of a safetensors file") || strings.Contains(r.stderr, "pserver-0") {
		t.Errorf("a missing --init-from file: exit %d, want 1 from train itself\n%s", r.code, r.stderr)
	}
}

// train connects its nodes over Unix-domain sockets unless --tcp: the plan
// records the endpoints it chose, and a sync job trains bitwise the same
// parameters over either (the transport moves bytes, never changes them).
func TestTrainOverUnixSocketsEqualsTCP(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("train uses TCP on Windows")
	}
	saved := map[string][]byte{}
	for _, net := range []string{"unix", "tcp"} {
		dir := t.TempDir()
		args := []string{"train", "examples/digits-mlp.yaml", "--trainers", "2", "--pservers", "2", "--steps", "60",
			"--plan-dir", filepath.Join(dir, "plan"), "--save", filepath.Join(dir, "out.safetensors")}
		if net == "tcp" {
			args = append(args, "--tcp")
		}
		r := psgraph(t, args...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", net, r.code, r.stderr)
		}
		p, err := partition.ReadPlan(filepath.Join(dir, "plan"))
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range p.Info.Endpoints {
			if isUnix := strings.HasPrefix(ep, "unix:"); isUnix != (net == "unix") {
				t.Errorf("train over %s recorded endpoint %q", net, ep)
			}
		}
		b, err := os.ReadFile(filepath.Join(dir, "out.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		saved[net] = b
	}
	if !bytes.Equal(saved["unix"], saved["tcp"]) {
		t.Fatalf("the job trained different parameters over Unix sockets (%d bytes) and TCP (%d bytes)", len(saved["unix"]), len(saved["tcp"]))
	}
}
