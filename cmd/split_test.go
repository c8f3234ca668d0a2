package cmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/partition"
)

func TestSplitCommand(t *testing.T) {
	t.Parallel()
	model := filepath.Join("..", "examples", "digits-mlp.yaml")
	out := filepath.Join(t.TempDir(), "plan")
	run := func(args ...string) (int, string, string) {
		var o, e bytes.Buffer
		code := Main(args, &o, &e)
		return code, o.String(), e.String()
	}
	code, stdout, stderr := run("split", model, "--trainers", "2", "--pservers", "2", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"split digits-mlp: 2 trainers (sync), 2 pservers", "W1", "-> pserver:", "send/recv pairs: 8"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	p, err := partition.ReadPlan(out)
	if err != nil {
		t.Fatal(err)
	}
	if p.Info.Trainers != 2 || len(p.PServers) != 2 || p.Info.SourceSHA256 == "" {
		t.Errorf("plan %+v", p.Info)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"split", model, "--trainers", "2", "--pservers", "2", "-o", out}, 1, "is not empty; choose another -o or pass --force"},
		{[]string{"split", model, "--trainers", "0", "--pservers", "2", "-o", out + "2"}, 2, "--trainers must be at least 1"},
		{[]string{"split", model, "--pservers", "2"}, 2, "split needs -o DIR"},
		{[]string{"split", model, "--mode", "lazy", "-o", out + "2"}, 2, "--mode must be sync or async"},
		{[]string{"split", model, "--pservers", "2", "--pserver-endpoints", "a:1", "-o", out + "2"}, 2, "lists 1 endpoints for --pservers 2"},
		{[]string{"split", "missing.yaml", "-o", out + "2"}, 1, "missing.yaml: cannot read model"},
	} {
		code, _, stderr := run(c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
	if code, _, stderr := run("split", model, "--pservers", "3", "--force", "-o", out); code != 0 {
		t.Fatalf("--force: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "pserver-2.yaml")); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run("split", model, "--pservers", "1", "--force", "-o", out); code != 0 {
		t.Fatalf("--force: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "pserver-2.yaml")); !os.IsNotExist(err) {
		t.Errorf("a stale pserver-2.yaml survived a split for one pserver: %v", err)
	}
	if code, _, stderr := run("check", filepath.Join(out, "trainer.yaml")); code != 0 {
		t.Fatalf("check trainer.yaml: %s", stderr)
	}
}
