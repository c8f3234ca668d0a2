package cmd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/psgraph/psgraph/exec/node"
	"github.com/psgraph/psgraph/internal/testfix"
	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
	"github.com/psgraph/psgraph/transport/testcert"
)

func splitDigits(t *testing.T, trainers int) string {
	t.Helper()
	plan := filepath.Join(t.TempDir(), "plan")
	if r := psgraph(t, "split", "examples/digits-mlp.yaml", "--trainers", fmt.Sprint(trainers), "--pservers", "1", "-o", plan); r.code != 0 {
		t.Fatalf("split: exit %d\n%s", r.code, r.stderr)
	}
	return plan
}

// A trainer with the wrong token is refused before any tensor is read and
// exits non-zero saying authentication failed, without printing a token.
func TestWrongTokenRefused(t *testing.T) {
	t.Parallel()
	plan := splitDigits(t, 1)
	addr := freeAddr(t)
	ps := start(t, "pserver-0", []string{"PSGRAPH_TOKEN=the-right-secret"}, "run", "--role", "pserver", "--index", "0", "--plan", plan, "--listen", addr)
	tr := start(t, "trainer-0", []string{"PSGRAPH_TOKEN=a-wrong-secret"}, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pserver-endpoints", addr, "--connect-timeout", "10s")
	r := tr.wait(t, 30*time.Second)
	if r.code == 0 || !strings.Contains(r.stderr, "authentication failed") {
		t.Fatalf("trainer with a wrong token: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	for _, secret := range []string{"the-right-secret", "a-wrong-secret"} {
		if strings.Contains(r.stderr, secret) || strings.Contains(ps.err.String(), secret) {
			t.Errorf("a log prints the token %q", secret)
		}
	}
	ps.cmd.Process.Signal(syscall.SIGTERM)
}

// A pserver on a non-loopback address needs a token, or --insecure.
func TestNonLoopbackListenNeedsToken(t *testing.T) {
	t.Parallel()
	plan := splitDigits(t, 1)
	r := psgraph(t, "run", "--role", "pserver", "--index", "0", "--plan", plan, "--listen", "0.0.0.0:0")
	if r.code != 1 || !strings.Contains(r.stderr, "refusing to listen on 0.0.0.0:0 without a token") || !strings.Contains(r.stderr, "--insecure") || !strings.Contains(r.stderr, "--token-file") {
		t.Fatalf("exit %d, want 1 naming the address, --token-file and --insecure; stderr:\n%s", r.code, r.stderr)
	}
}

// Garbage, an oversized frame header and a half-written handshake at a
// live pserver close those connections only: the job then runs normally.
func TestGarbageAtLivePserver(t *testing.T) {
	t.Parallel()
	plan := splitDigits(t, 1)
	addr := freeAddr(t)
	env := []string{"PSGRAPH_TOKEN=secret"}
	// A handshake that stalls (the last payload) is cut off after
	// --handshake-timeout.
	ps := start(t, "pserver-0", env, "run", "--role", "pserver", "--index", "0", "--plan", plan, "--listen", addr, "--handshake-timeout", "1s")
	dial := func() net.Conn {
		for deadline := time.Now().Add(20 * time.Second); ; {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				return c
			}
			if time.Now().After(deadline) {
				t.Fatalf("pserver never listened: %v", err)
			}
			time.Sleep(20 * time.Millisecond) // polling a port that is not open yet
		}
	}
	payloads := [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, make([]byte, 64)...),
		{0x50, 0x53},
	}
	for _, p := range payloads {
		c := dial()
		c.Write(p)
		c.SetReadDeadline(time.Now().Add(15 * time.Second))
		buf := make([]byte, 256)
		for { // the pserver must close the connection
			_, err := c.Read(buf)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("the pserver kept a connection that sent %q open for 15 s", p)
			}
			if err != nil {
				break
			}
		}
		c.Close()
	}
	tr := start(t, "trainer-0", env, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pserver-endpoints", addr, "--steps", "200")
	if r := tr.wait(t, 60*time.Second); r.code != 0 {
		t.Fatalf("trainer after garbage: exit %d\n%s", r.code, r.stderr)
	}
	if r := ps.wait(t, 30*time.Second); r.code != 0 {
		t.Fatalf("pserver after garbage: exit %d\n%s", r.code, r.stderr)
	}
}

// SIGKILL of a trainer in a sync job: the pserver stops with an error
// naming the lost trainer after --trainer-timeout and tells the other
// trainer why (an abort frame), which stops at once with that error, not
// after waiting for the pserver to come back. Nothing hangs.
func TestKilledTrainerStopsTheJob(t *testing.T) {
	t.Parallel()
	plan := splitDigits(t, 2)
	addr := freeAddr(t)
	env := []string{"PSGRAPH_TOKEN=secret"}
	ps := start(t, "pserver-0", env, "run", "--role", "pserver", "--index", "0", "--plan", plan, "--listen", addr, "--trainer-timeout", "3s")
	t0 := start(t, "trainer-0", env, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pserver-endpoints", addr, "--steps", "100000000", "--log-every", "100", "--connect-timeout", "3s")
	t1 := start(t, "trainer-1", env, "run", "--role", "trainer", "--index", "1", "--plan", plan, "--pserver-endpoints", addr, "--steps", "100000000", "--log-every", "100")
	waitForLine(t, t1, "step=100")
	t1.cmd.Process.Kill()
	r := ps.wait(t, 60*time.Second)
	if r.code == 0 || !strings.Contains(r.stderr, "trainer-1") {
		t.Fatalf("pserver: exit %d, want non-zero naming trainer-1:\n%s", r.code, r.stderr)
	}
	r = t0.wait(t, 60*time.Second)
	// The abort frame stops it, not its own --connect-timeout (which would
	// say "lost pserver-0 and it did not come back within 3s").
	if r.code != 1 || !strings.Contains(r.stderr, "pserver-0: stopped the job: trainer-1 was lost") || strings.Contains(r.stderr, "lost pserver-0 and it did not come back") {
		t.Fatalf("trainer-0: exit %d, want 1 with pserver-0's reason naming trainer-1:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	t.Logf("trainer-0 ends with: %s", lines[len(lines)-1])
}

// waitForLine waits until p's stderr holds s.
func waitForLine(t *testing.T, p *proc, s string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(p.stderrText(), s); {
		if time.Now().After(deadline) {
			t.Fatalf("%s never logged %q:\n%s", p.name, s, p.stderrText())
		}
		time.Sleep(20 * time.Millisecond) // polling a growing log
	}
}

// A rerun of train with the same --checkpoint-dir resumes where the first
// run's checkpoints end, and finishes exactly where an uninterrupted job
// finishes.
func TestTrainResumesFromCheckpointDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	whole, resumed := filepath.Join(dir, "whole.safetensors"), filepath.Join(dir, "resumed.safetensors")
	args := []string{"train", "examples/digits-mlp.yaml", "--trainers", "2", "--pservers", "2"}
	if r := psgraph(t, append(args, "--steps", "200", "--save", whole)...); r.code != 0 {
		t.Fatalf("uninterrupted: exit %d\n%s", r.code, r.stderr)
	}
	if r := psgraph(t, append(args, "--steps", "120", "--checkpoint-dir", ck, "--checkpoint-every", "50")...); r.code != 0 {
		t.Fatalf("first part: exit %d\n%s", r.code, r.stderr)
	}
	r := psgraph(t, append(args, "--steps", "200", "--checkpoint-dir", ck, "--checkpoint-every", "50", "--save", resumed)...)
	if r.code != 0 {
		t.Fatalf("resumed: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "resuming from the checkpoints of step 120") {
		t.Errorf("the rerun does not say it resumes at step 120 (the first part's last checkpoint):\n%s", r.stderr)
	}
	a, b := readTensors(t, whole), readTensors(t, resumed)
	for name, x := range a {
		if d := rel(x, b[name]); d != 0 {
			t.Errorf("%s: resumed job differs from the uninterrupted one (relative %.2g)", name, d)
		}
	}
}

// SIGKILL of a trainer in a sync job, then a restart with the same index:
// the pserver waits for it, sends the new process the current parameters,
// and the job finishes with the accuracy of an undisturbed run.
func TestRestartedTrainerRejoins(t *testing.T) {
	t.Parallel()
	plan := splitDigits(t, 2)
	addr := freeAddr(t)
	env := []string{"PSGRAPH_TOKEN=secret"}
	const steps = "1500"
	ps := start(t, "pserver-0", env, "run", "--role", "pserver", "--index", "0", "--plan", plan, "--listen", addr, "--trainer-timeout", "30s")
	t0 := start(t, "trainer-0", env, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pserver-endpoints", addr, "--steps", steps, "--log-every", "50")
	t1 := start(t, "trainer-1", env, "run", "--role", "trainer", "--index", "1", "--plan", plan, "--pserver-endpoints", addr, "--steps", steps, "--log-every", "50")
	waitForLine(t, t1, "step=200")
	t1.cmd.Process.Kill()
	t1.wait(t, 10*time.Second)
	waitForLine(t, ps, "lost a trainer")
	t1b := start(t, "trainer-1 (restarted)", env, "run", "--role", "trainer", "--index", "1", "--plan", plan, "--pserver-endpoints", addr, "--steps", steps, "--log-every", "50")
	dumpOnFailure(t, ps, t1, t1b)
	for _, p := range []*proc{t0, t1b} {
		r := p.wait(t, 120*time.Second)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", p.name, r.code, r.stderr)
		}
		if acc, _ := summary(t, r)["acc"].(float64); acc < 0.95 {
			t.Errorf("%s: digits accuracy %v after a trainer restart, want >= 0.95", p.name, acc)
		}
	}
	if r := ps.wait(t, 30*time.Second); r.code != 0 {
		t.Fatalf("pserver: exit %d\n%s", r.code, r.stderr)
	}
	for _, l := range strings.Split(t1b.stderrText()+ps.stderrText(), "\n") {
		if strings.Contains(l, "joining") || strings.Contains(l, "restarted") || strings.Contains(l, "lost") {
			t.Log(l)
		}
	}
	if !strings.Contains(t1b.stderrText(), "joining at the pservers' step") {
		t.Errorf("the restarted trainer did not join at the running step:\n%s", t1b.stderrText())
	}
	if !strings.Contains(ps.stderrText(), "trainer restarted") {
		t.Errorf("the pserver did not report the restart:\n%s", ps.stderrText())
	}
}

// --tls-cert/--tls-key on the pserver and --tls-ca on the trainer run a job
// over TLS; a trainer without TLS cannot talk to that pserver.
func TestJobOverTLS(t *testing.T) {
	t.Parallel()
	set, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, cert, key := file("ca.pem", set.CAPEM), file("cert.pem", set.CertPEM), file("key.pem", set.KeyPEM)
	plan := splitDigits(t, 1)
	env := []string{"PSGRAPH_TOKEN=secret"}
	addr := freeAddr(t)
	ps := start(t, "pserver-0", env, "run", "--role", "pserver", "--index", "0", "--plan", plan, "--listen", addr, "--tls-cert", cert, "--tls-key", key)
	plain := start(t, "plain trainer", env, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pserver-endpoints", addr, "--steps", "10", "--connect-timeout", "1s")
	if r := plain.wait(t, 30*time.Second); r.code == 0 {
		t.Fatal("a trainer without TLS trained against a TLS pserver")
	}
	tr := start(t, "trainer-0", env, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pserver-endpoints", addr, "--steps", "100", "--tls-ca", ca)
	if r := tr.wait(t, 60*time.Second); r.code != 0 {
		t.Fatalf("TLS trainer: exit %d\n%s", r.code, r.stderr)
	}
	if r := ps.wait(t, 30*time.Second); r.code != 0 {
		t.Fatalf("TLS pserver: exit %d\n%s", r.code, r.stderr)
	}
}

// SIGKILL of a pserver mid-run and its restart with the same command line
// (--checkpoint-dir): it restores its newest checkpoint, the running
// trainers reconnect and tell it where they are, it starts at their step,
// and the job finishes with the accuracy of an undisturbed run.
func TestKilledPserverRestartsFromCheckpoint(t *testing.T) {
	t.Parallel()
	const steps = "1500"
	dir := t.TempDir()
	plan, ck := filepath.Join(dir, "plan"), filepath.Join(dir, "ck")
	if r := psgraph(t, "split", "examples/digits-mlp.yaml", "--trainers", "2", "--pservers", "2", "-o", plan); r.code != 0 {
		t.Fatalf("split: exit %d\n%s", r.code, r.stderr)
	}
	addrs := []string{freeAddr(t), freeAddr(t)}
	env := []string{"PSGRAPH_TOKEN=secret"}
	pserver := func(name string, i int) *proc {
		return start(t, name, env, "run", "--role", "pserver", "--index", fmt.Sprint(i), "--plan", plan, "--listen", addrs[i],
			"--checkpoint-dir", ck, "--checkpoint-every", "50", "--trainer-timeout", "20s", "--log-every", "100")
	}
	ps0, ps1 := pserver("pserver-0", 0), pserver("pserver-1", 1)
	var trainers []*proc
	for i := 0; i < 2; i++ {
		trainers = append(trainers, start(t, fmt.Sprintf("trainer-%d", i), env, "run", "--role", "trainer", "--index", fmt.Sprint(i), "--plan", plan,
			"--pservers", strings.Join(addrs, ","), "--steps", steps, "--log-every", "100", "--connect-timeout", "20s"))
	}
	waitForLine(t, ps1, "checkpoint saved")
	ps1.cmd.Process.Kill()
	ps1.wait(t, 10*time.Second)
	ps1b := pserver("pserver-1 (restarted)", 1)
	all := append([]*proc{ps0, ps1, ps1b}, trainers...)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range all {
				t.Logf("%s stderr:\n%s", p.name, p.stderrText())
			}
		}
	})
	var acc []float64
	for _, p := range trainers {
		r := p.wait(t, 60*time.Second)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", p.name, r.code, r.stderr)
		}
		a, _ := summary(t, r)["acc"].(float64)
		acc = append(acc, a)
	}
	for _, p := range []*proc{ps0, ps1b} {
		if r := p.wait(t, 30*time.Second); r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", p.name, r.code, r.stderr)
		}
	}
	m := regexp.MustCompile(`resumed from checkpoint .*step=(\d+)`).FindStringSubmatch(ps1b.stderrText())
	if m == nil {
		t.Fatalf("the restarted pserver did not restore a checkpoint:\n%s", ps1b.stderrText())
	}
	restored, _ := strconv.Atoi(m[1])
	first, _ := summary(t, result{stdout: ps1b.out.String()})["first_step"].(float64)
	t.Logf("pserver-1 restored its checkpoint of step %d and started at step %v", restored, first)
	if restored < 50 || int(first) < restored {
		t.Errorf("the restarted pserver restored step %d and started at %v; want a checkpoint >= 50 and a start at or after it", restored, first)
	}
	// An undisturbed run of the same job, for comparison.
	r := psgraph(t, "train", "examples/digits-mlp.yaml", "--trainers", "2", "--pservers", "2", "--steps", steps, "--log-every", steps)
	if r.code != 0 {
		t.Fatalf("undisturbed run: exit %d\n%s", r.code, r.stderr)
	}
	want, _ := summary(t, r)["acc"].(float64)
	t.Logf("digits accuracy after the pserver restart %v, undisturbed %v", acc, want)
	for i, a := range acc {
		if a < 0.95 || a < want-0.01 {
			t.Errorf("trainer-%d: digits accuracy %v after a pserver restart, want >= 0.95 and within 0.01 of the undisturbed %v", i, a, want)
		}
	}
	for _, l := range strings.Split(ps1b.stderrText()+trainers[0].stderrText(), "\n") {
		if strings.Contains(l, "resumed") || strings.Contains(l, "restarted") || strings.Contains(l, "lost") || strings.Contains(l, "resumes") {
			t.Log(l)
		}
	}
	if int(first) > restored && !strings.Contains(ps1b.stderrText(), "restarted into a running job") {
		t.Errorf("the restarted pserver skipped steps %d..%v without saying so:\n%s", restored, first, ps1b.stderrText())
	}
	for _, p := range trainers {
		if !strings.Contains(p.stderrText(), "the restarted pserver resumes") {
			t.Errorf("%s did not report the pserver restart:\n%s", p.name, p.stderrText())
		}
	}
}

// The same for a pserver holding a lookup-table shard (and the dense W):
// SIGKILL mid-run, restart with the same command line. Its checkpoint
// holds the shard and its optimizer state; the trainers, blocked on its
// rows or sending it row gradients, wait for it, tell it where they are
// and re-send what it lost; every node exits 0, the restarted pserver
// writes its shard (--save), and the trainers end with the loss of an
// undisturbed run. By default the jobs run 3000 steps; with -long 6000.
func TestKilledTablePserverRestartsFromCheckpoint(t *testing.T) {
	t.Parallel()
	const model, init = "testdata/sparse/emb-adagrad.yaml", "testdata/sparse/init.safetensors"
	steps := "3000"
	if testfix.IsLong() {
		steps = "6000"
	}
	dir := t.TempDir()
	plan, ck := filepath.Join(dir, "plan"), filepath.Join(dir, "ck")
	if r := psgraph(t, "split", model, "--trainers", "2", "--pservers", "2", "-o", plan); r.code != 0 {
		t.Fatalf("split: exit %d\n%s", r.code, r.stderr)
	}
	addrs := []string{freeAddr(t), freeAddr(t)}
	env := []string{"PSGRAPH_TOKEN=secret"}
	shard := func(i int) string { return filepath.Join(dir, fmt.Sprintf("pserver-%d.safetensors", i)) }
	pserver := func(name string, i int) *proc {
		return start(t, name, env, "run", "--role", "pserver", "--index", fmt.Sprint(i), "--plan", plan, "--listen", addrs[i],
			"--init-from", init, "--save", shard(i),
			"--checkpoint-dir", ck, "--checkpoint-every", "200", "--trainer-timeout", "20s", "--log-every", "1000")
	}
	ps0, ps1 := pserver("pserver-0", 0), pserver("pserver-1", 1)
	var trainers []*proc
	for i := 0; i < 2; i++ {
		trainers = append(trainers, start(t, fmt.Sprintf("trainer-%d", i), env, "run", "--role", "trainer", "--index", fmt.Sprint(i), "--plan", plan,
			"--pservers", strings.Join(addrs, ","), "--steps", steps, "--batch", "8", "--log-every", "1000", "--connect-timeout", "20s"))
	}
	waitForLine(t, ps0, "checkpoint saved")
	ps0.cmd.Process.Kill()
	ps0.wait(t, 10*time.Second)
	ps0b := pserver("pserver-0 (restarted)", 0)
	all := append([]*proc{ps0, ps0b, ps1}, trainers...)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range all {
				t.Logf("%s stderr:\n%s", p.name, p.stderrText())
			}
		}
	})
	var loss []float64
	for _, p := range trainers {
		r := p.wait(t, 60*time.Second)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", p.name, r.code, r.stderr)
		}
		l, _ := summary(t, r)["loss"].(float64)
		loss = append(loss, l)
	}
	for _, p := range []*proc{ps0b, ps1} {
		if r := p.wait(t, 30*time.Second); r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", p.name, r.code, r.stderr)
		}
	}
	m := regexp.MustCompile(`resumed from checkpoint .*step=(\d+)`).FindStringSubmatch(ps0b.stderrText())
	if m == nil {
		t.Fatalf("the restarted pserver did not restore a checkpoint:\n%s", ps0b.stderrText())
	}
	restored, _ := strconv.Atoi(m[1])
	first, _ := summary(t, result{stdout: ps0b.out.String()})["first_step"].(float64)
	t.Logf("pserver-0 restored its checkpoint of step %d and started at step %v", restored, first)
	if restored < 200 || int(first) < restored {
		t.Errorf("the restarted pserver restored step %d and started at %v; want a checkpoint >= 200 and a start at or after it", restored, first)
	}
	for i := range 2 {
		if _, err := os.Stat(shard(i)); err != nil {
			t.Errorf("pserver-%d did not save its shard: %v", i, err)
		}
	}
	for _, p := range trainers {
		if !strings.Contains(p.stderrText(), "the restarted pserver resumes") {
			t.Errorf("%s did not report the pserver restart:\n%s", p.name, p.stderrText())
		}
	}
	r := psgraph(t, "train", model, "--trainers", "2", "--pservers", "2", "--steps", steps, "--batch", "8", "--init-from", init, "--log-every", steps)
	if r.code != 0 {
		t.Fatalf("undisturbed run: exit %d\n%s", r.code, r.stderr)
	}
	want, _ := summary(t, r)["loss"].(float64)
	t.Logf("loss over the last steps after the pserver restart %v, undisturbed %v", loss, want)
	for i, l := range loss {
		if l > 1.1*want || want == 0 {
			t.Errorf("trainer-%d: loss %v after a pserver restart, want within 10%% of the undisturbed %v", i, l, want)
		}
	}
}

// The children of psgraph train authenticate with the token train
// generates: while the job runs, a peer presenting the job's identity
// (its plan's JobHash) as trainer-0 with no token or a made-up one is
// refused with ErrAuth, and pserver-0 logs the refusal. Were the children
// tokenless (loopback allows it), the tokenless peer would pass the proof
// and be refused only as an already connected trainer-0.
func TestTrainChildrenRequireTheGeneratedToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, "train", nil, "train", "examples/digits-mlp.yaml", "--trainers", "1", "--pservers", "1", "--steps", "100000000", "--log-every", "100", "--plan-dir", dir)
	waitForLine(t, p, "step=100")
	plan, err := partition.ReadPlan(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{"", "a-made-up-token"} {
		cfg := transport.Config{
			Self: transport.Trainer(0), Token: []byte(token), JobHash: node.JobHash(plan),
			Peers:          map[transport.NodeID]string{transport.PServer(0): plan.Info.Endpoints[0]},
			ConnectTimeout: 10 * time.Second,
		}
		ep, err := transport.Dial(context.Background(), cfg)
		if err == nil {
			ep.Close()
		}
		if !errors.Is(err, transport.ErrAuth) {
			t.Errorf("dialing pserver-0 of a running train with token %q: %v, want %v", token, err, transport.ErrAuth)
		}
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	r := p.wait(t, 60*time.Second)
	if n := strings.Count(r.stderr, "authentication failed"); n < 2 {
		t.Errorf("pserver-0 logged %d authentication failures, want one per refused peer:\n%s", n, r.stderr)
	}
	// SIGTERM, passed on, ends each child by itself (before, a node of a
	// file's job ignored it and train killed it after its grace period).
	for _, child := range []string{"trainer-0", "pserver-0"} {
		if want := child + " | psgraph: stopped by a signal (terminated) before the end"; !strings.Contains(r.stderr, want) {
			t.Errorf("train's output lacks %q:\n%s", want, r.stderr)
		}
	}
	if r.code != 1 {
		t.Errorf("train after SIGTERM: exit %d, want 1 (stopped before the end)", r.code)
	}
}

// A pserver killed and never started again: the trainer waits for it up
// to --connect-timeout, then exits 1 naming the pserver, its address and
// the way out; it does not hang.
func TestKilledPserverThatNeverReturns(t *testing.T) {
	t.Parallel()
	plan := splitDigits(t, 1)
	addr := freeAddr(t)
	env := []string{"PSGRAPH_TOKEN=secret"}
	ps := start(t, "pserver-0", env, "run", "--role", "pserver", "--index", "0", "--plan", plan, "--listen", addr)
	tr := start(t, "trainer-0", env, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pserver-endpoints", addr, "--steps", "100000000", "--log-every", "100", "--connect-timeout", "2s")
	waitForLine(t, tr, "step=100")
	ps.cmd.Process.Kill()
	ps.wait(t, 30*time.Second)
	r := tr.wait(t, 60*time.Second)
	for _, want := range []string{"lost pserver-0 and it did not come back within 2s", addr, "raise --connect-timeout"} {
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Fatalf("trainer-0: exit %d, want 1 saying %q:\n%s", r.code, want, r.stderr)
		}
	}
}

// writeDigitsVariant writes examples/digits-mlp.yaml with the edits
// (old, new pairs) into a temporary directory, its data path absolute.
func writeDigitsVariant(t *testing.T, edits ...string) string {
	t.Helper()
	src, err := os.ReadFile("../examples/digits-mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := filepath.Abs("../examples/data")
	out := strings.ReplaceAll(string(src), "csv: data/", "csv: "+data+"/")
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(out, edits[i]) {
			t.Fatalf("examples/digits-mlp.yaml changed: it lacks %q", edits[i])
		}
		out = strings.Replace(out, edits[i], edits[i+1], 1)
	}
	model := filepath.Join(t.TempDir(), "digits-variant.yaml")
	if err := os.WriteFile(model, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return model
}

func splitModel(t *testing.T, model string, trainers int) string {
	t.Helper()
	plan := filepath.Join(t.TempDir(), "plan")
	if r := psgraph(t, "split", model, "--trainers", fmt.Sprint(trainers), "--pservers", "1", "-o", plan); r.code != 0 {
		t.Fatalf("split: exit %d\n%s", r.code, r.stderr)
	}
	return plan
}

// A trainer whose loss turns NaN exits 1 saying so and why it may, and
// tells the pserver, which exits 1 with that cause instead of waiting for
// the trainer to come back.
func TestNaNLossStopsTheJob(t *testing.T) {
	t.Parallel()
	plan := splitModel(t, writeDigitsVariant(t, "{type: sgd, lr: 0.1}", "{type: sgd, lr: 1e30}"), 1)
	addr := freeAddr(t)
	env := []string{"PSGRAPH_TOKEN=secret"}
	ps := start(t, "pserver-0", env, "run", "--role", "pserver", "--index", "0", "--plan", plan, "--listen", addr)
	tr := start(t, "trainer-0", env, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pserver-endpoints", addr, "--steps", "1000")
	const why = "the loss is NaN; lower the learning rate"
	for _, p := range []*proc{tr, ps} {
		if r := p.wait(t, 60*time.Second); r.code != 1 || !strings.Contains(r.stderr, why) {
			t.Errorf("%s: exit %d, want 1 saying %q:\n%s", p.name, r.code, why, r.stderr)
		}
	}
}

// A bad batch: trainer-1's rows of step 2 hold a malformed line of a
// streamed file. trainer-1 exits 1 naming the file and line; the pserver
// passes its reason on, so trainer-0, whose own rows are fine, exits 1
// with that first cause too, and nothing waits for a timeout.
func TestBadBatchStopsTheJob(t *testing.T) {
	t.Parallel()
	lines, err := os.ReadFile("../examples/data/digits.csv")
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.SplitAfter(string(lines), "\n")
	// batch 64, 2 trainers: step 2 (k=1) is rows [128, 256), trainer-1's
	// half [192, 256); row 199 is line 200.
	rows[199] = "0,0,oops" + rows[199][len("0,0,0"):]
	csv := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(csv, []byte(strings.Join(rows, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	model := writeDigitsVariant(t, "normalize: standard", "stream: true")
	src, _ := os.ReadFile(model)
	abs, _ := filepath.Abs("../examples/data/digits.csv")
	if err := os.WriteFile(model, []byte(strings.Replace(string(src), abs, csv, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := splitModel(t, model, 2)
	addr := freeAddr(t)
	env := []string{"PSGRAPH_TOKEN=secret"}
	ps := start(t, "pserver-0", env, "run", "--role", "pserver", "--index", "0", "--plan", plan, "--listen", addr, "--trainer-timeout", "60s")
	t0 := start(t, "trainer-0", env, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pserver-endpoints", addr, "--steps", "1000", "--connect-timeout", "60s")
	t1 := start(t, "trainer-1", env, "run", "--role", "trainer", "--index", "1", "--plan", plan, "--pserver-endpoints", addr, "--steps", "1000")
	why := csv + ":200:"
	r1 := t1.wait(t, 30*time.Second)
	if r1.code != 1 || !strings.Contains(r1.stderr, why) {
		t.Fatalf("trainer-1: exit %d, want 1 naming %s:\n%s", r1.code, why, r1.stderr)
	}
	for _, p := range []*proc{t0, ps} {
		if r := p.wait(t, 30*time.Second); r.code != 1 || !strings.Contains(r.stderr, why) || !strings.Contains(r.stderr, "trainer-1") {
			t.Errorf("%s: exit %d, want 1 with trainer-1's reason (%s...):\n%s", p.name, r.code, why, r.stderr)
		}
	}
}

// A checkpoint is also written at the last step, locally and on the
// pservers, so a finished run can be continued from where it ended; and
// the last checkpoint equals the saved model.
func TestCheckpointAtTheLastStep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	steps := func(manifest string) []any {
		b, err := os.ReadFile(manifest)
		if err != nil {
			t.Fatal(err)
		}
		var m struct{ Steps []any }
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m.Steps
	}
	for _, c := range []struct {
		args     []string
		manifest string
	}{
		{[]string{"run", "--role", "local", "examples/iris.yaml"}, "local.json"},
		{[]string{"train", "examples/digits-mlp.yaml", "--trainers", "1", "--pservers", "1"}, "pserver-0.json"},
	} {
		ck, save := filepath.Join(dir, c.manifest+".ck"), filepath.Join(dir, c.manifest+".safetensors")
		if r := psgraph(t, append(c.args, "--steps", "50", "--checkpoint-dir", ck, "--checkpoint-every", "30", "--save", save)...); r.code != 0 {
			t.Fatalf("%v: exit %d\n%s", c.args, r.code, r.stderr)
		}
		if got := fmt.Sprint(steps(filepath.Join(ck, c.manifest))); got != "[30 50]" {
			t.Errorf("%v: checkpoints of steps %s, want [30 50]", c.args, got)
		}
		last, saved := readTensors(t, filepath.Join(ck, strings.TrimSuffix(c.manifest, ".json")+".step-50.safetensors")), readTensors(t, save)
		for name, v := range saved {
			if w, ok := last[name]; !ok || rel(v, w) != 0 {
				t.Errorf("%v: %s in the step-50 checkpoint differs from the saved model", c.args, name)
			}
		}
	}
}
