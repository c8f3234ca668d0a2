package cmd_test

import (
	bin "encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// savedNorm is the normalization metadata of a saved model.
func savedNorm(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := bin.LittleEndian.Uint64(b[:8])
	var h struct {
		Meta map[string]string `json:"__metadata__"`
	}
	if err := json.Unmarshal(b[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"normalize": h.Meta["normalize"], "shift": h.Meta["normalize_shift"], "scale": h.Meta["normalize_scale"]}
}

// Training started --init-from a saved model normalizes the features with
// the statistics the file holds, which its parameters were trained for,
// not the new data's own: yesterday's model goes on with today's rows
// (here iris with every feature times 3 plus 10) scaled as before, in
// memory, streamed and in a 2x2 job, and saves those statistics again.
// Without --init-from the same data gives its own; a local run resumed
// from its checkpoints keeps the statistics it was trained with; a file
// saved with another normalize mode is refused at data.normalize.
func TestInitFromKeepsNormalization(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	raw, err := os.ReadFile("../examples/data/iris.csv")
	if err != nil {
		t.Fatal(err)
	}
	var shifted []string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.Split(line, ",")
		for i := range 4 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				t.Fatal(err)
			}
			f[i] = strconv.FormatFloat(3*v+10, 'g', -1, 64)
		}
		shifted = append(shifted, strings.Join(f, ","))
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("day1.csv", string(raw))
	write("day2.csv", strings.Join(shifted, "\n")+"\n")
	model := func(name, csv, extra string) string {
		return write(name, fmt.Sprintf(`psgraph: 1
name: iris
data:
  csv: %s
  features: {name: x, columns: [0, 4]}
  label: {name: y, column: 4}
%s
params:
  W: {shape: [4, 3], init: {type: xavier_uniform, seed: 1}}
  b: {shape: [3]}
ops:
  - {type: matmul, inputs: [x, W], outputs: [z0]}
  - {type: add, inputs: [z0, b], outputs: [logits]}
  - {type: softmax_cross_entropy, inputs: [logits, y], outputs: [loss]}
train: {loss: loss, batch: 10, steps: 6, optimizer: {type: sgd, lr: 0.1}}
`, csv, extra))
	}
	day1 := model("day1.yaml", "day1.csv", "  normalize: standard")
	day2 := model("day2.yaml", "day2.csv", "  normalize: standard")
	day2s := model("day2s.yaml", "day2.csv", "  normalize: standard\n  stream: true")
	minmax := model("minmax.yaml", "day2.csv", "  normalize: minmax")
	save := func(args ...string) (map[string]string, result) {
		out := filepath.Join(t.TempDir(), "m.safetensors")
		r := psgraph(t, append(args, "--save", out)...)
		ok(t, r)
		return savedNorm(t, out), r
	}
	m1, _ := save("run", "--role", "local", day1)
	own, _ := save("run", "--role", "local", day2)
	if m1["normalize"] != "standard" || m1["shift"] == "" || m1["shift"] == own["shift"] || m1["scale"] == own["scale"] {
		t.Fatalf("day 1's statistics %v and day 2's own %v: want two different standard ones", m1, own)
	}
	from := filepath.Join(dir, "day1.safetensors")
	ok(t, psgraph(t, "run", "--role", "local", day1, "--save", from))
	for _, c := range []struct {
		name string
		args []string
	}{
		{"in memory", []string{"run", "--role", "local", day2}},
		{"streamed", []string{"run", "--role", "local", day2s}},
		{"2x2 job", []string{"train", day2, "--trainers", "2", "--pservers", "2"}},
		{"2x2 job, streamed", []string{"train", day2s, "--trainers", "2", "--pservers", "2"}},
	} {
		got, r := save(append(c.args, "--init-from", from)...)
		if got["shift"] != m1["shift"] || got["scale"] != m1["scale"] {
			t.Errorf("%s: saved statistics %v, want the --init-from file's %v", c.name, got, m1)
		}
		if !strings.Contains(r.stderr, "normalizing the features with the statistics saved in --init-from") {
			t.Errorf("%s: no log line saying the file's statistics are used:\n%s", c.name, r.stderr)
		}
	}
	// A local run started --init-from and resumed from its checkpoint
	// without it goes on with the statistics it was trained with, which
	// the checkpoint carries.
	for _, m := range []string{day2, day2s} {
		ck := []string{"--checkpoint-dir", filepath.Join(t.TempDir(), "ck"), "--checkpoint-every", "3"}
		save(append([]string{"run", "--role", "local", m, "--steps", "3", "--init-from", from}, ck...)...)
		got, r := save(append([]string{"run", "--role", "local", m, "--steps", "6"}, ck...)...)
		if !strings.Contains(r.stderr, "resumed from checkpoint") || !strings.Contains(r.stderr, "statistics of the checkpoint resumed from") {
			t.Fatalf("%s: the second run did not resume with the checkpoint's statistics:\n%s", m, r.stderr)
		}
		if got["shift"] != m1["shift"] || got["scale"] != m1["scale"] {
			t.Errorf("%s resumed: saved statistics %v, want those it was trained with, %v", m, got, m1)
		}
	}

	// Another mode, none included, is refused at the model's
	// data.normalize (line 7 of the files above; none: the data section),
	// locally and by train before any child starts.
	none := model("none.yaml", "day2.csv", "")
	for _, c := range []struct {
		args []string
		at   string
	}{
		{[]string{"run", "--role", "local", minmax}, "minmax.yaml:7:14:"},
		{[]string{"train", minmax, "--trainers", "2", "--pservers", "2"}, "minmax.yaml:7:14:"},
		{[]string{"run", "--role", "local", none}, "none.yaml:4:3:"},
	} {
		r := psgraph(t, append(c.args, "--init-from", from)...)
		if r.code != 1 || !strings.Contains(r.stderr, c.at) || !strings.Contains(r.stderr, "normalized by standard") || strings.Contains(r.stderr, "pserver-0") {
			t.Errorf("%v from a standard file: exit %d, want 1 and an error at %s\n%s", c.args, r.code, c.at, r.stderr)
		}
	}
}
