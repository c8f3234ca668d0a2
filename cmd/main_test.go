package cmd_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/psgraph/psgraph/cmd"
	"github.com/psgraph/psgraph/internal/testfix"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// binary is the psgraph executable the tests run: this test binary,
// linked (or copied) as a file named psgraph, which runs main.go's main
// when started under that name (TestMain). A go build of the command
// here relinked it on every go test ./cmd: 3.6 s of CPU before the first
// test.
var binary string

// sharedDir holds fixtures tests share (TestMain removes it).
var sharedDir string

func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "psgraph" {
		os.Exit(cmd.Process()) // main.go's main
	}
	flag.Parse()
	// The parallel tests here mostly wait on their processes (a
	// handshake timeout, a restart, a reconnect): four at a time on any
	// machine, unless -parallel says otherwise.
	parallel := false
	flag.Visit(func(f *flag.Flag) { parallel = parallel || f.Name == "test.parallel" })
	if !parallel {
		flag.Set("test.parallel", "4")
	}
	dir, err := os.MkdirTemp("", "psgraph-cmd-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "psgraph")
	sharedDir = dir
	if err := linkSelf(binary); err != nil {
		fmt.Fprintln(os.Stderr, "making the psgraph binary:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// linkSelf makes path this executable: a hard link, or a copy where
// the two are on different file systems.
func linkSelf(path string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if os.Link(self, path) == nil {
		return nil
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

type result struct {
	code           int
	stdout, stderr string
}

// psgraph runs the binary from the repository root, so paths in arguments
// and messages are relative to it.
func psgraph(t *testing.T, args ...string) result {
	t.Helper()
	c := exec.Command(binary, args...)
	c.Dir = ".."
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("running psgraph %v: %v", args, err)
	}
	r := result{code, out.String(), errb.String()}
	for _, bad := range []string{"panic", "goroutine", ".go:"} {
		if strings.Contains(r.stderr, bad) || strings.Contains(r.stdout, bad) {
			t.Errorf("psgraph %v output contains %q:\n%s%s", args, bad, r.stdout, r.stderr)
		}
	}
	return r
}

func TestCheckBadModelExits1WithPosition(t *testing.T) {
	t.Parallel()
	cases := []badInput{
		{"dsl/testdata/errors/unknown_op.yaml", `dsl/testdata/errors/unknown_op.yaml:10:12: unknown op "matmull" (did you mean "matmul"?)`},
		{"dsl/testdata/errors/matmul_mismatch.yaml", "dsl/testdata/errors/matmul_mismatch.yaml:9:5: op matmul (x float32[1, 4], W float32[5, 3])"},
		{"dsl/testdata/errors/yaml_syntax.yaml", "dsl/testdata/errors/yaml_syntax.yaml:2:1: invalid YAML"},
		{"dsl/testdata/errors/csv_label_not_integer.yaml", `dsl/testdata/errors/data/fraclabel.csv:2: column 4: "0.5" must be a non-negative integer`},
		{"dsl/testdata/errors/loss_label_int_for_mse.yaml", "dsl/testdata/errors/loss_label_int_for_mse.yaml:10:5: op mse reads \"target\", the data label, as its target, but the label is int32 class ids"},
		{"does/not/exist.yaml", "does/not/exist.yaml: cannot read model: no such file or directory"},
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.file), func(t *testing.T) {
			r := psgraph(t, "check", c.file)
			c.check(t, r)
		})
	}
}

// A --batch too large for memory is an error at the model's data node, not a
// crash in the allocator.
func TestRunHugeBatchExits1(t *testing.T) {
	t.Parallel()
	r := psgraph(t, "run", "--role", "local", "--batch", "1000000000", "examples/digits-mlp.yaml")
	badInput{"", `examples/digits-mlp.yaml:6:13: data "x" is [1000000000, 64] at batch 1000000000`}.check(t, r)
}

type badInput struct{ file, want string }

func (c badInput) check(t *testing.T, r result) {
	t.Helper()
	if r.code != 1 {
		t.Errorf("exit code %d, want 1; stderr:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, c.want) {
		t.Errorf("stderr lacks %q:\n%s", c.want, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout should be empty on error, got:\n%s", r.stdout)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no args", nil, "missing command"},
		{"unknown command", []string{"chek", "x.yaml"}, `unknown command "chek" (did you mean "check"?)`},
		{"unknown flag", []string{"check", "--frobnicate", "examples/digits-mlp.yaml"}, "unknown flag: --frobnicate"},
		{"check without file", []string{"check"}, "expects one model file, got 0"},
		{"run without role", []string{"run", "examples/digits-mlp.yaml"}, "run needs --role"},
		{"run with bad role", []string{"run", "--role", "worker", "examples/digits-mlp.yaml"}, `--role "worker" is not supported`},
		{"pserver with a model file", []string{"run", "--role", "pserver", "examples/digits-mlp.yaml"}, "takes no model file"},
		{"trainer without plan", []string{"run", "--role", "trainer", "--index", "0"}, "needs --plan DIR"},
		{"train without model", []string{"train", "--trainers", "2"}, "expects one model file"},
		{"train with bad mode", []string{"train", "--mode", "fast", "examples/digits-mlp.yaml"}, "--mode must be sync or async"},
		{"bad log format", []string{"run", "--role", "local", "--log-format", "xml", "examples/digits-mlp.yaml"}, "--log-format must be console or json"},
		{"negative steps", []string{"run", "--role", "local", "--steps", "-3", "examples/digits-mlp.yaml"}, "--steps and --batch must be positive"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := psgraph(t, c.args...)
			if r.code != 2 {
				t.Errorf("exit code %d, want 2; stderr:\n%s", r.code, r.stderr)
			}
			if !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "psgraph --help") {
				t.Errorf("stderr lacks %q and the --help hint:\n%s", c.want, r.stderr)
			}
		})
	}
}

func TestCheckDigitsSummary(t *testing.T) {
	t.Parallel()
	r := psgraph(t, "check", "examples/digits-mlp.yaml")
	if r.code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", r.code, r.stderr)
	}
	golden := filepath.Join("testdata", "check-digits.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(r.stdout), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd -run TestCheckDigitsSummary -update)", err)
	}
	if r.stdout != string(want) {
		t.Errorf("check output differs from %s\n got:\n%s\nwant:\n%s", golden, r.stdout, want)
	}
	// The summary must name what the issue asks for, whatever the golden says.
	for _, s := range []string{"vars:", "W1               [64, 128]         8192 elements", "forward ops:", "backward ops (generated):", "optimize ops (generated), optimizer sgd"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("summary lacks %q", s)
		}
	}
}

func TestRunLocalPrintsJSONSummaryLast(t *testing.T) {
	t.Parallel()
	model := filepath.Join(t.TempDir(), "tiny.yaml")
	if err := os.WriteFile(model, []byte(testfix.TinyModel), 0o644); err != nil {
		t.Fatal(err)
	}
	r := psgraph(t, "run", "--role", "local", "--steps", "40", "--log-format", "json", model)
	if r.code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	last := lines[len(lines)-1]
	var sum map[string]any
	if err := json.Unmarshal([]byte(last), &sum); err != nil {
		t.Fatalf("last stdout line is not JSON: %v\n%q", err, last)
	}
	if sum["role"] != "local" {
		t.Errorf("role = %v, want local", sum["role"])
	}
	if bytesOf(sum, "sent_bytes") != 0 || bytesOf(sum, "recv_bytes") != 0 {
		t.Errorf("a local run reports traffic: %v", sum)
	}
	if steps, _ := sum["steps"].(float64); steps != 40 {
		t.Errorf("steps = %v, want 40 (the --steps flag overrides train.steps)", sum["steps"])
	}
	loss, ok := sum["loss"].(float64)
	if !ok || loss <= 0 || loss > 10 {
		t.Errorf("loss = %v, want a positive cross-entropy", sum["loss"])
	}
	if acc, ok := sum["acc"].(float64); !ok || acc < 0 || acc > 1 {
		t.Errorf("acc = %v, want a fraction", sum["acc"])
	}
	// Training reduces the loss: one step leaves it higher than forty.
	one := psgraph(t, "run", "--role", "local", "--steps", "1", "--log-format", "json", model)
	var sum1 struct{ Loss float64 }
	if err := json.Unmarshal([]byte(strings.TrimSpace(one.stdout)), &sum1); err != nil || one.code != 0 {
		t.Fatalf("run --steps 1: exit %d, %v\n%s%s", one.code, err, one.stdout, one.stderr)
	}
	if !(loss < sum1.Loss) {
		t.Errorf("loss after 40 steps %g is not below the loss after 1 step %g", loss, sum1.Loss)
	}
	// Progress goes to stderr as JSON lines, so stdout holds only the summary.
	if len(lines) != 1 {
		t.Errorf("stdout has %d lines, want only the summary:\n%s", len(lines), r.stdout)
	}
}

// check names the row gradients of an embedding model.
func TestCheckShowsRowGradients(t *testing.T) {
	t.Parallel()
	r := psgraph(t, "check", "testdata/sparse/emb-adagrad.yaml")
	if r.code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", r.code, r.stderr)
	}
	if want := "row-sparse (1): emb@GRAD float32[40, ...] rows<=40 (9 more values hold its rows)"; !strings.Contains(r.stdout, want) {
		t.Fatalf("check output lacks %q:\n%s", want, r.stdout)
	}
	if !strings.Contains(r.stdout, "gather_rows x2") {
		t.Fatalf("check output lacks the optimizer's gather_rows ops:\n%s", r.stdout)
	}
}

// check refuses a model that run would refuse as having nothing to train,
// with run's message and the position of its train section, but accepts
// an empty pserver subgraph that split wrote (more pservers than blocks):
// the plan.yaml beside it lists it with its hash. The same file copied
// out of its plan directory is refused like any model.
func TestCheckRefusesNothingToTrain(t *testing.T) {
	t.Parallel()
	const why = "the model has no train.optimizer, so there is nothing to train"
	badInput{"", "cmd/testdata/no-optimizer.yaml:12:3: " + why}.check(t, psgraph(t, "check", "cmd/testdata/no-optimizer.yaml"))
	for _, args := range [][]string{{"run", "--role", "local"}, {"train"}} {
		badInput{"", "cmd/testdata/no-optimizer.yaml:12:3: " + why}.check(t, psgraph(t, append(args, "cmd/testdata/no-optimizer.yaml")...))
	}

	dir := t.TempDir()
	if r := psgraph(t, "split", "examples/iris.yaml", "--trainers", "1", "--pservers", "6", "-o", dir); r.code != 0 {
		t.Fatalf("split: exit %d\n%s", r.code, r.stderr)
	}
	empty := filepath.Join(dir, "pserver-5.yaml")
	if r := psgraph(t, "check", empty); r.code != 0 || !strings.Contains(r.stdout, ": ok") {
		t.Fatalf("check of split's empty pserver subgraph: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	src, err := os.ReadFile(empty)
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(t.TempDir(), "pserver-5.yaml")
	if err := os.WriteFile(moved, src, 0o644); err != nil {
		t.Fatal(err)
	}
	badInput{"", moved + ":5:3: " + why}.check(t, psgraph(t, "check", moved))
}

// In split and train --pservers is the pserver count; run names the
// pservers' addresses --pserver-endpoints, as split does, and still takes
// --pservers for them with a warning.
func TestRunPServerEndpointsFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if r := psgraph(t, "split", "examples/iris.yaml", "--trainers", "1", "--pservers", "2", "-o", dir); r.code != 0 {
		t.Fatalf("split: exit %d\n%s", r.code, r.stderr)
	}
	for _, flag := range []string{"--pserver-endpoints", "--pservers"} {
		r := psgraph(t, "run", "--role", "trainer", "--index", "0", "--plan", dir, flag, "127.0.0.1:1")
		if r.code != 2 || !strings.Contains(r.stderr, "needs --pserver-endpoints with 2 host:port entries") {
			t.Errorf("%s with one address for two pservers: exit %d, want 2 naming --pserver-endpoints:\n%s", flag, r.code, r.stderr)
		}
		if deprecated := strings.Contains(r.stderr, "warning: --pservers is the pserver count in split and train; give run the pservers' addresses as --pserver-endpoints"); deprecated != (flag == "--pservers") {
			t.Errorf("%s: deprecation warning shown %v:\n%s", flag, deprecated, r.stderr)
		}
	}
	if r := psgraph(t, "run", "--role", "trainer", "--index", "0", "--plan", dir, "--pservers", "127.0.0.1:1", "--pserver-endpoints", "127.0.0.1:2"); r.code != 2 || !strings.Contains(r.stderr, "give only --pserver-endpoints") {
		t.Errorf("both spellings at once: exit %d, want 2 refusing them:\n%s", r.code, r.stderr)
	}
	if r := psgraph(t, "run", "--help"); !strings.Contains(r.stdout, "--pserver-endpoints") || strings.Contains(r.stdout, "      --pservers ") {
		t.Errorf("run --help should list --pserver-endpoints and hide --pservers:\n%s", r.stdout)
	}
}

// check --ops prints the model as run executes it: a model file holding
// the generated backward and optimizer ops, which loads as it is (no
// optimizer to expand again) and trains to the same parameters as the
// original.
func TestCheckOpsPrintsTheExpandedModel(t *testing.T) {
	t.Parallel()
	r := psgraph(t, "check", "examples/iris.yaml", "--ops")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"section: backward", "section: optimize", "W1@m:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the expanded model lacks %q:\n%.1500s", want, r.stdout)
		}
	}
	dir := t.TempDir()
	expanded := filepath.Join(dir, "expanded.yaml")
	if err := os.WriteFile(expanded, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")
	for _, run := range [][2]string{{"examples/iris.yaml", a}, {expanded, b}} {
		if r := psgraph(t, "run", "--role", "local", run[0], "--steps", "50", "--save", run[1]); r.code != 0 {
			t.Fatalf("run %s: exit %d\n%s", run[0], r.code, r.stderr)
		}
	}
	x, y := readTensors(t, a), readTensors(t, b)
	for name, v := range x {
		if d := rel(v, y[name]); d != 0 {
			t.Errorf("%s: the expanded model trains to other values (relative %.2g)", name, d)
		}
	}
}

// Connection retries are debug detail: a trainer started before its
// pserver retries quietly by default and says so with --log-level debug.
func TestLogLevel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if r := psgraph(t, "split", "examples/iris.yaml", "--trainers", "1", "--pservers", "1", "-o", dir); r.code != 0 {
		t.Fatalf("split: exit %d\n%s", r.code, r.stderr)
	}
	for _, c := range []struct {
		level   string
		retries bool
	}{{"", false}, {"debug", true}} {
		args := []string{"run", "--role", "trainer", "--index", "0", "--plan", dir, "--pserver-endpoints", freeAddr(t), "--connect-timeout", "300ms"}
		if c.level != "" {
			args = append(args, "--log-level", c.level)
		}
		r := psgraph(t, args...)
		if r.code != 1 {
			t.Fatalf("--log-level %q: exit %d, want 1 (no pserver):\n%s", c.level, r.code, r.stderr)
		}
		if got := strings.Contains(r.stderr, "connect failed, retrying"); got != c.retries {
			t.Errorf("--log-level %q: retries logged %v, want %v:\n%s", c.level, got, c.retries, r.stderr)
		}
	}
	if r := psgraph(t, "run", "--role", "local", "examples/iris.yaml", "--log-level", "loud"); r.code != 2 || !strings.Contains(r.stderr, "--log-level must be debug, info, warn or error") {
		t.Errorf("--log-level loud: exit %d\n%s", r.code, r.stderr)
	}
}

// --steps 0 is refused before anything trains: the flag's default 0 means
// the model's train.steps, and a typed 0 used to train those steps.
func TestStepsZeroIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	save := filepath.Join(dir, "out.safetensors")
	for _, args := range [][]string{
		{"run", "--role", "local", "examples/digits-mlp.yaml", "--steps", "0", "--save", save},
		{"run", "--role", "trainer", "--index", "0", "--plan", dir, "--steps", "0"},
		{"train", "examples/digits-mlp.yaml", "--trainers", "2", "--pservers", "1", "--steps", "0", "--save", save},
	} {
		r := psgraph(t, args...)
		if r.code != 2 {
			t.Errorf("psgraph %v: exit %d, want 2; stderr:\n%s", args, r.code, r.stderr)
		}
		if want := "--steps 0 trains nothing; to evaluate a saved model use psgraph eval"; !strings.Contains(r.stderr, want) {
			t.Errorf("psgraph %v: stderr lacks %q:\n%s", args, want, r.stderr)
		}
		if r.stdout != "" || strings.Contains(r.stderr, "step=") {
			t.Errorf("psgraph %v trained or printed a summary:\n%s%s", args, r.stdout, r.stderr)
		}
		if _, err := os.Stat(save); err == nil {
			t.Errorf("psgraph %v wrote %s", args, save)
		}
	}
}

// Each progress line says the step, the run's total, the percentage done,
// the rate and the time left.
func TestProgressFields(t *testing.T) {
	t.Parallel()
	r := psgraph(t, "run", "--role", "local", "examples/iris.yaml", "--steps", "100", "--log-every", "50", "--log-format", "json")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["message"] != "train" {
			continue
		}
		eta, err := time.ParseDuration(fmt.Sprint(m["eta"]))
		if err != nil || eta < 0 {
			t.Errorf("eta %v in %s", m["eta"], line)
		}
		if sps, ok := m["steps_per_s"].(float64); !ok || sps <= 0 {
			t.Errorf("no rate in %s", line)
		}
		got = append(got, fmt.Sprintf("%v/%v %v%%", m["step"], m["of"], m["pct"]))
	}
	if want := []string{"1/100 1%", "50/100 50%", "100/100 100%"}; !slices.Equal(got, want) {
		t.Errorf("progress %q, want %q", got, want)
	}
}
