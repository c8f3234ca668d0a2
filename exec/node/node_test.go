package node

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/psgraph/psgraph/exec/pserver"
	"github.com/psgraph/psgraph/exec/trainer"
	"github.com/psgraph/psgraph/internal/testfix"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"

	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
)

// writePlan splits src like `psgraph split` and returns the plan's directory.
func writePlan(t *testing.T, src string, trainers, pservers int) string {
	t.Helper()
	dir := t.TempDir()
	model := filepath.Join(dir, "model.yaml")
	if err := os.WriteFile(model, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := dsl.LoadBytes(model, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := partition.Split(g, partition.Options{Trainers: trainers, PServers: pservers, Source: model, SourceSHA256: partition.HashSource([]byte(src))})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "plan")
	if err := plan.Write(out); err != nil {
		t.Fatal(err)
	}
	return out
}

// freeAddr returns a loopback address nobody listens on (testfix.FreeAddr).
func freeAddr(t *testing.T) string {
	t.Helper()
	return testfix.FreeAddr(t)
}

type outcome struct {
	sum any
	err error
}

// start runs a node in a goroutine; cancel stops it and waits for it.
func start(t *testing.T, o Options) (result <-chan outcome, cancel func()) {
	t.Helper()
	o.Log = zerolog.New(zerolog.NewTestWriter(t)).With().Str("role", o.Name()).Logger()
	return startWith(t, o)
}

// startWith is start with the node's logger as o has it.
func startWith(t *testing.T, o Options) (result <-chan outcome, cancel func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	ch := make(chan outcome, 1)
	go func() {
		sum, err := Run(ctx, o)
		ch <- outcome{sum, err}
	}()
	stopped := false
	cancel = func() {
		if !stopped {
			stopped = true
			stop()
		}
	}
	t.Cleanup(cancel)
	return ch, cancel
}

// startLogging is start with each log line also handed to on.
func startLogging(t *testing.T, o Options, on func(line string)) (<-chan outcome, func()) {
	t.Helper()
	o.Log = zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), lineFunc(on)))
	return startWith(t, o)
}

type lineFunc func(string)

func (f lineFunc) Write(p []byte) (int, error) { f(string(p)); return len(p), nil }

// wait returns the node's outcome, failing the test after a minute.
func wait(t *testing.T, name string, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(time.Minute):
		t.Fatalf("%s did not return within a minute", name)
	}
	return outcome{}
}

// A pserver and a trainer built from Options, in this process over
// loopback TCP with a token, train the plan to the end: the trainer runs
// the steps asked for, the pserver serves as many, and what one sent the
// other received.
func TestRunPServerAndTrainer(t *testing.T) {
	plan := writePlan(t, testfix.TinyModel, 1, 1)
	addr := freeAddr(t)
	ps, _ := start(t, Options{Role: "pserver", Index: 0, Plan: plan, Listen: addr, Token: "secret", ResumeStep: -1, TrainerTimeout: 10 * time.Second})
	tr, _ := start(t, Options{Role: "trainer", Index: 0, Plan: plan, PServers: []string{addr}, Token: "secret", Steps: 20, StartStep: -1, ConnectTimeout: 20 * time.Second})
	trr := wait(t, "trainer-0", tr)
	if trr.err != nil {
		t.Fatalf("trainer: %v", trr.err)
	}
	psr := wait(t, "pserver-0", ps)
	if psr.err != nil {
		t.Fatalf("pserver: %v", psr.err)
	}
	ts, ok := trr.sum.(*trainer.Summary)
	if !ok {
		t.Fatalf("trainer summary is %T, want *exec.Summary", trr.sum)
	}
	ss, ok := psr.sum.(*pserver.ServeSummary)
	if !ok {
		t.Fatalf("pserver summary is %T, want *exec.ServeSummary", psr.sum)
	}
	if ts.Role != "trainer-0" || ts.Steps != 20 {
		t.Errorf("trainer summary: role %q, %d steps; want trainer-0, 20", ts.Role, ts.Steps)
	}
	if ss.Role != "pserver-0" || ss.Steps != 20 {
		t.Errorf("pserver summary: role %q, %d steps; want pserver-0, 20", ss.Role, ss.Steps)
	}
	if ts.SentBytes == 0 || ts.SentBytes != ss.RecvBytes || ss.SentBytes != ts.RecvBytes {
		t.Errorf("trainer sent %d and received %d bytes; pserver received %d and sent %d", ts.SentBytes, ts.RecvBytes, ss.RecvBytes, ss.SentBytes)
	}
}

// Stop closed ends a node of a job reading a file at once, as psgraph's
// first SIGTERM does, with context.Canceled, while its job still runs
// (a billion steps) and its context never ends. Before, the goroutine
// that watched Stop read Options.Stop after Run had cleared it, so a
// trainer and a pserver ignored SIGTERM and psgraph train killed them
// after its grace period.
func TestStopEndsANodeOfAFileJob(t *testing.T) {
	plan := writePlan(t, testfix.TinyModel, 1, 1)
	addr := freeAddr(t)
	logged := make(chan struct{})
	var once sync.Once
	stops := map[string]chan struct{}{"pserver-0": make(chan struct{}), "trainer-0": make(chan struct{})}
	psOpt := Options{Role: "pserver", Index: 0, Plan: plan, Listen: addr, Token: "secret", ResumeStep: -1, TrainerTimeout: 10 * time.Second, Stop: stops["pserver-0"]}
	trOpt := Options{Role: "trainer", Index: 0, Plan: plan, PServers: []string{addr}, Token: "secret", Steps: 1_000_000_000, StartStep: -1, ConnectTimeout: 20 * time.Second, LogEvery: 10, Stop: stops["trainer-0"]}
	ps, _ := start(t, psOpt)
	tr, _ := startLogging(t, trOpt, func(line string) {
		if strings.Contains(line, `"step":10`) {
			once.Do(func() { close(logged) })
		}
	})
	select {
	case <-logged:
	case r := <-tr:
		t.Fatalf("the trainer ended before step 10: %v", r.err)
	}
	for _, n := range []struct {
		name string
		ch   <-chan outcome
	}{{"trainer-0", tr}, {"pserver-0", ps}} {
		close(stops[n.name])
		if r := wait(t, n.name, n.ch); !errors.Is(r.err, context.Canceled) {
			t.Errorf("%s after Stop: %v, want %v", n.name, r.err, context.Canceled)
		}
	}
}

// The token of Options reaches the handshake: a trainer without it, or
// with another one, is refused by a pserver that holds it, and a trainer
// of another plan (another wire identity, JobHash) is refused as such.
func TestPServerRefusesWrongTokenAndOtherJob(t *testing.T) {
	plan := writePlan(t, testfix.TinyModel, 1, 1)
	other := writePlan(t, strings.Replace(testfix.TinyModel, "name: tiny", "name: other", 1), 1, 1)
	addr := freeAddr(t)
	ps, stop := start(t, Options{Role: "pserver", Index: 0, Plan: plan, Listen: addr, Token: "the-token", ResumeStep: -1})
	cases := []struct {
		name, plan, token string
		want              error
	}{
		{"no token", plan, "", transport.ErrAuth},
		{"wrong token", plan, "another-token", transport.ErrAuth},
		{"other plan", other, "the-token", transport.ErrJobMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, _ := start(t, Options{Role: "trainer", Index: 0, Plan: c.plan, PServers: []string{addr}, Token: c.token, Steps: 5, StartStep: -1, ConnectTimeout: 10 * time.Second})
			r := wait(t, "trainer-0", tr)
			if !errors.Is(r.err, c.want) {
				t.Fatalf("trainer: %v, want %v", r.err, c.want)
			}
			if c.token != "" && strings.Contains(r.err.Error(), c.token) {
				t.Errorf("the error prints the token: %v", r.err)
			}
		})
	}
	stop()
	if r := wait(t, "pserver-0", ps); r.err == nil {
		t.Errorf("pserver stopped before any trainer finished returned no error")
	}
}

func TestJobHashIsTheModelsSourceAndName(t *testing.T) {
	a, err := partition.ReadPlan(writePlan(t, testfix.TinyModel, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	b, err := partition.ReadPlan(writePlan(t, testfix.TinyModel+"\n", 2, 1))
	if err != nil {
		t.Fatal(err)
	}
	want := partition.HashSource([]byte(testfix.TinyModel)) + "/tiny"
	if got := JobHash(a); got != want {
		t.Errorf("JobHash = %q, want %q", got, want)
	}
	if JobHash(a) == JobHash(b) {
		t.Errorf("two sources share the wire identity %q", JobHash(a))
	}
}

// Options that contradict the role or the plan are usage errors naming
// the flag, found before the node listens or dials.
func TestOptionMistakesAreUsageErrors(t *testing.T) {
	plan := writePlan(t, testfix.TinyModel, 1, 1)
	ps := func(edit func(*Options)) Options {
		o := Options{Role: "pserver", Index: 0, Plan: plan, Listen: "127.0.0.1:0", ResumeStep: -1}
		edit(&o)
		return o
	}
	tr := func(edit func(*Options)) Options {
		o := Options{Role: "trainer", Index: 0, Plan: plan, PServers: []string{"127.0.0.1:1"}, StartStep: -1, ConnectTimeout: time.Second}
		edit(&o)
		return o
	}
	cases := []struct {
		name string
		opt  Options
		want string
	}{
		{"local role", Options{Role: "local", Plan: plan}, `--role "local" is not a node of a split job`},
		{"no plan", tr(func(o *Options) { o.Plan = "" }), "run --role trainer needs --plan DIR"},
		{"trainer index", tr(func(o *Options) { o.Index = 1 }), "run --role trainer needs --index between 0 and 0 (the plan has 1 trainers)"},
		{"negative index", ps(func(o *Options) { o.Index = -1 }), "run --role pserver needs --index between 0 and 0"},
		{"pserver steps", ps(func(o *Options) { o.Steps = 3 }), "--metrics, --steps and --batch are trainer flags"},
		{"pserver save without tables", ps(func(o *Options) { o.Save = "x.safetensors" }), "this plan has none; give --save to trainer 0"},
		{"pserver without address", ps(func(o *Options) { o.Listen = "" }), "run --role pserver needs --listen HOST:PORT"},
		{"pserver cert without key", ps(func(o *Options) { o.TLSCert = "cert.pem" }), "--tls-cert and --tls-key go together"},
		{"pserver CA without cert", ps(func(o *Options) { o.TLSCA = "ca.pem" }), "a pserver with TLS needs --tls-cert and --tls-key"},
		{"pserver negative checkpoint-every", ps(func(o *Options) { o.CheckpointEvery = -1 }), "--checkpoint-every must be 0 (never) or a number of steps, got -1"},
		{"pserver checkpoint-every without dir", ps(func(o *Options) { o.CheckpointEvery = 5 }), "--checkpoint-every needs --checkpoint-dir"},
		{"trainer init-from", tr(func(o *Options) { o.InitFrom = "x.safetensors" }), "--init-from is a pserver flag"},
		{"trainer checkpoint-dir", tr(func(o *Options) { o.CheckpointDir = t.TempDir() }), "--checkpoint-dir is a pserver flag"},
		{"trainer pserver count", tr(func(o *Options) { o.PServers = []string{"127.0.0.1:1", "127.0.0.1:2"} }), "run --role trainer needs --pserver-endpoints with 1 host:port entries (one per pserver of the plan), got 2"},
		{"trainer no pservers", tr(func(o *Options) { o.PServers = nil }), "needs --pserver-endpoints with 1 host:port entries"},
		{"trainer key without cert", tr(func(o *Options) { o.TLSKey = "key.pem" }), "--tls-cert and --tls-key go together"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Run(context.Background(), c.opt)
			var u *UsageError
			if !errors.As(err, &u) {
				t.Fatalf("Run: %v, want a usage error", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("Run: %v\nwant it to say %q", err, c.want)
			}
		})
	}
}

// A plan that cannot be read is bad input, not a usage error, and names
// the directory.
func TestMissingPlanIsNotAUsageError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "no-plan")
	_, err := Run(context.Background(), Options{Role: "trainer", Plan: dir})
	var u *UsageError
	if err == nil || errors.As(err, &u) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Run with a missing plan: %v, want an error naming %s that is not a usage error", err, dir)
	}
}
