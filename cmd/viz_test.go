package cmd_test

import (
	"bytes"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/cmd/internal/viz"
	"github.com/psgraph/psgraph/exec/blas"
)

func TestVizCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan")
	if r := psgraph(t, "split", "examples/digits-mlp.yaml", "--trainers", "2", "--pservers", "2", "-o", plan); r.code != 0 {
		t.Fatalf("split: %s", r.stderr)
	}
	metrics := filepath.Join(dir, "run.jsonl")
	if r := psgraph(t, "run", "--role", "local", "examples/digits-mlp.yaml", "--steps", "30", "--log-every", "10", "--metrics", metrics); r.code != 0 {
		t.Fatalf("run: %s", r.stderr)
	}
	// The curve starts at step 1: logged besides every --log-every steps.
	run, err := viz.ReadRun(metrics)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{1, 10, 20, 30}; !slices.Equal(run.Steps, want) {
		t.Errorf("metrics logged at steps %v, want %v", run.Steps, want)
	}
	cases := []struct {
		args []string
		out  string
		want string // a prefix or marker of the file
	}{
		{[]string{"examples/digits-mlp.yaml"}, "model.dot", `digraph "digits-mlp"`},
		{[]string{"examples/digits-mlp.yaml", "--collapse-backward"}, "model.svg", "<svg"},
		{[]string{plan}, "plan.svg", "<svg"},
		{[]string{plan, "--collapse-backward"}, "plan.png", "\x89PNG"},
		{[]string{plan, "--comm-only"}, "comm.dot", `"cluster_pserver:1"`},
		{[]string{metrics}, "loss.png", "\x89PNG"},
		{[]string{metrics, metrics}, "loss.svg", "<svg"},
	}
	for _, c := range cases {
		out := filepath.Join(dir, c.out)
		r := psgraph(t, append(append([]string{"viz"}, c.args...), "-o", out)...)
		if r.code != 0 {
			t.Errorf("viz %v: exit %d: %s", c.args, r.code, r.stderr)
			continue
		}
		b, err := os.ReadFile(out)
		if err != nil || !bytes.Contains(b, []byte(c.want)) {
			t.Errorf("viz %v -o %s: %v; the file lacks %q", c.args, c.out, err, c.want)
		}
		if strings.HasSuffix(c.out, ".png") {
			if _, err := png.Decode(bytes.NewReader(b)); err != nil {
				t.Errorf("%s does not decode: %v", c.out, err)
			}
		}
	}
}

func TestVizAndK8sUsageErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"viz", "examples/digits-mlp.yaml"}, "viz needs -o FILE"},
		{[]string{"viz", "examples/digits-mlp.yaml", "-o", "x.pdf"}, "use .dot, .svg or .png"},
		{[]string{"viz", "examples/digits-mlp.yaml", "--comm-only", "-o", "x.dot"}, "--comm-only draws a plan"},
		{[]string{"viz", "examples/digits-mlp.yaml", "examples/iris.yaml", "-o", "x.dot"}, "one model or plan at a time"},
		{[]string{"k8s", "plan/"}, "--image is required"},
		{[]string{"version", "extra"}, "expects no arguments"},
	}
	for _, c := range cases {
		r := psgraph(t, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("psgraph %v: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	r := psgraph(t, "viz", "no/such/run.jsonl", "-o", filepath.Join(t.TempDir(), "x.png"))
	if r.code != 1 || !strings.Contains(r.stderr, "no/such/run.jsonl: cannot read the metrics file") {
		t.Errorf("missing metrics file: exit %d, %s", r.code, r.stderr)
	}
}

func TestK8sCommand(t *testing.T) {
	t.Parallel()
	plan := filepath.Join(t.TempDir(), "plan")
	if r := psgraph(t, "split", "examples/digits-mlp.yaml", "--trainers", "2", "--pservers", "2", "-o", plan); r.code != 0 {
		t.Fatalf("split: %s", r.stderr)
	}
	r := psgraph(t, "k8s", plan, "--image", "psgraph:test", "--name", "digits")
	if r.code != 0 {
		t.Fatalf("k8s: exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"kind: ConfigMap", "kind: Service", "kind: PersistentVolumeClaim", "kind: Job", "name: digits-pserver-1", "name: digits-trainer-1", "digits-pserver-0.digits:7000,digits-pserver-1.digits:7000", "name: digits-token", "claimName: digits-model"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("manifests lack %q", want)
		}
	}
}

func TestVersionAndCompletion(t *testing.T) {
	t.Parallel()
	r := psgraph(t, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "psgraph dev (go") || !strings.HasSuffix(r.stdout, "; kernels "+blas.VecName()+", gemm "+blas.Name()+")\n") {
		t.Errorf("version: exit %d, %q", r.code, r.stdout)
	}
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		r := psgraph(t, "completion", sh)
		if r.code != 0 || !strings.Contains(r.stdout, "psgraph") {
			t.Errorf("completion %s: exit %d, %d bytes: %s", sh, r.code, len(r.stdout), r.stderr)
		}
	}
	// completion did not swallow the root's own unknown-command handling
	r = psgraph(t, "vis", "x")
	if r.code != 2 || !strings.Contains(r.stderr, `unknown command "vis" (did you mean "viz"?)`) {
		t.Errorf("unknown command: exit %d, %s", r.code, r.stderr)
	}
}

// A psgraph process that draws nothing does not start Graphviz: the
// WebAssembly module is instantiated on first use (third_party/go-graphviz,
// psgraph's patch), not in a package init, where it cost every trainer,
// pserver and check 4 MiB and about 43 ms of CPU at start.
func TestStartInstantiatesNoGraphviz(t *testing.T) {
	t.Parallel()
	c := exec.Command(binary, "version")
	c.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("psgraph version: %v\n%s", err, stderr.String())
	}
	inits, bytesAllocated := 0, 0
	for _, line := range strings.Split(stderr.String(), "\n") {
		// init github.com/goccy/go-graphviz/cgraph @13 ms, 0.009 ms clock, 248 bytes, 5 allocs
		f := strings.Fields(line)
		if len(f) < 11 || f[0] != "init" || !strings.Contains(f[1], "go-graphviz") || f[8] != "bytes," {
			continue
		}
		n, err := strconv.Atoi(f[7])
		if err != nil {
			t.Fatalf("inittrace line %q: %v", line, err)
		}
		inits++
		bytesAllocated += n
	}
	if inits == 0 {
		t.Fatalf("no go-graphviz package init in GODEBUG=inittrace=1 output (is it still linked?):\n%s", stderr.String())
	}
	if bytesAllocated > 64<<10 {
		t.Errorf("go-graphviz's package inits allocated %d bytes at start: the WebAssembly module is instantiated eagerly again", bytesAllocated)
	}
}
