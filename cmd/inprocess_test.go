package cmd_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// train --in-process runs the nodes of a job inside one process over the
// in-memory transport: a sync 2x2 job trains bitwise the parameters the
// same job of child processes over sockets trains, prints trainer 0's
// summary last, writes every trainer's progress file, and opens no
// socket (its plan records no endpoints).
func TestTrainInProcessEqualsProcesses(t *testing.T) {
	t.Parallel()
	saved := map[string][]byte{}
	for _, how := range []string{"processes", "in-process"} {
		dir := t.TempDir()
		args := []string{"train", "examples/digits-mlp.yaml", "--trainers", "2", "--pservers", "2", "--steps", "60",
			"--plan-dir", filepath.Join(dir, "plan"), "--save", filepath.Join(dir, "out.safetensors"), "--metrics", filepath.Join(dir, "m.jsonl")}
		if how == "in-process" {
			args = append(args, "--in-process")
		}
		r := psgraph(t, args...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", how, r.code, r.stderr)
		}
		if s := summary(t, r); s["role"] != "trainer-0" || s["steps"] != 60.0 {
			t.Errorf("%s: the summary printed last is %v, want trainer-0's of 60 steps", how, s)
		}
		for _, m := range []string{"m.jsonl", "m.trainer-1.jsonl"} {
			if b, err := os.ReadFile(filepath.Join(dir, m)); err != nil || !bytes.Contains(b, []byte(`"step":60`)) {
				t.Errorf("%s: %s holds no line of step 60 (%v)", how, m, err)
			}
		}
		plan, err := os.ReadFile(filepath.Join(dir, "plan", "plan.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if hasEndpoints := bytes.Contains(plan, []byte("endpoints:")); hasEndpoints != (how == "processes") {
			t.Errorf("%s: plan.yaml records endpoints: %v", how, hasEndpoints)
		}
		b, err := os.ReadFile(filepath.Join(dir, "out.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		saved[how] = b
	}
	if !bytes.Equal(saved["processes"], saved["in-process"]) {
		t.Fatalf("the job trained different parameters in child processes (%d bytes) and in one process (%d bytes)", len(saved["processes"]), len(saved["in-process"]))
	}
}

// What a job in one process cannot do is refused before it starts, by
// the flag's name, with exit 2.
func TestTrainInProcessRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	online := streamModel(t, dir, "csv: "+genRows(t, dir, 100)+"\n  follow: true", "normalize: none", "sgd")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"examples/digits-mlp.yaml", "--tcp"}, "--in-process connects the nodes in memory, and --tcp"},
		{[]string{"examples/digits-mlp.yaml", "--serve", "127.0.0.1:0"}, "--serve starts a serving replica"},
		{[]string{"examples/digits-mlp.yaml", "--checkpoint-dir", dir}, "--checkpoint-dir and --checkpoint-every"},
		{[]string{"examples/digits-mlp.yaml", "--checkpoint-every", "10"}, "--checkpoint-dir and --checkpoint-every"},
		{[]string{online}, "this model reads an online source (data.online)"},
	} {
		args := append([]string{"train", "--trainers", "2", "--pservers", "2", "--in-process"}, c.args...)
		r := psgraph(t, args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("psgraph %v: exit %d, want 2 with %q:\n%s", args, r.code, c.want, r.stderr)
		}
	}
}
