package cmd_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/internal/testfix"
)

// wholeModelRows is the CTR table of the whole-model test: 4M rows of 16
// float32s, 244 MiB, many times a batch's rows (256 x 26 ids).
const wholeModelRows = 4_000_000

// A 2x2 CTR job started role by role, as the Kubernetes manifests start
// it: trainer 0's --save is the whole model, its 244 MiB table pulled from
// the pservers at the end chunk by chunk, while trainer 0's peak memory
// stays far below the table's size. psgraph train of the same plan writes
// the same file byte for byte (the job is sync, so both runs compute the
// same), and psgraph eval of both gives the same loss and AUC.
func TestHandRunTableJobSavesWholeModel(t *testing.T) {
	testfix.Long(t)
	model := ctrExample(t, func(s string) string {
		s = strings.Replace(s, "hash_buckets: 1000000", fmt.Sprintf("hash_buckets: %d", wholeModelRows), 1)
		return strings.Replace(s, "emb: {shape: [1000000, 16]", fmt.Sprintf("emb: {shape: [%d, 16]", wholeModelRows), 1)
	})
	dir := filepath.Dir(model)
	plan := filepath.Join(dir, "plan")
	ok(t, psgraph(t, "split", model, "--trainers", "2", "--pservers", "2", "-o", plan))
	const steps = "60"
	addrs := []string{freeAddr(t), freeAddr(t)}
	env := []string{"PSGRAPH_TOKEN=test-token"}
	hand := filepath.Join(dir, "hand.safetensors")
	var ps []*proc
	for i, a := range addrs {
		ps = append(ps, start(t, fmt.Sprintf("pserver-%d", i), env, "run", "--role", "pserver", "--index", fmt.Sprint(i), "--plan", plan, "--listen", a))
	}
	t0 := start(t, "trainer-0", env, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pserver-endpoints", strings.Join(addrs, ","), "--steps", steps, "--save", hand)
	t1 := start(t, "trainer-1", env, "run", "--role", "trainer", "--index", "1", "--plan", plan, "--pserver-endpoints", strings.Join(addrs, ","), "--steps", steps)
	for _, p := range append([]*proc{t0, t1}, ps...) {
		if r := p.wait(t, 3*time.Minute); r.code != 0 {
			t.Fatalf("%s exit %d\n%s", p.name, r.code, r.stderr)
		}
	}
	for _, l := range strings.Split(t0.stderrText(), "\n") {
		if strings.Contains(l, "pulled the tables into the file") {
			t.Log(l)
		}
	}
	table := int64(wholeModelRows) * 16 * 4
	rss := maxRSS(t0)
	t.Logf("peak RSS: trainer-0 (saving) %.0f MiB, trainer-1 %.0f MiB, pserver-0 %.0f MiB; the table %.0f MiB", mib(rss), mib(maxRSS(t1)), mib(maxRSS(ps[0])), mib(table))
	if rss == 0 {
		t.Log("peak memory is not measured on this system")
	} else if rss > table/2 {
		t.Errorf("trainer 0 peaked at %.0f MiB saving a table of %.0f MiB; its memory should not grow with the table", mib(rss), mib(table))
	}

	trained := filepath.Join(dir, "train.safetensors")
	ok(t, psgraph(t, "train", model, "--trainers", "2", "--pservers", "2", "--steps", steps, "--save", trained))
	a, err := os.ReadFile(hand)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(trained)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("the hand-run job saved %d bytes, train %d; want the same file", len(a), len(b))
	}
	ts, _, err := modelfile.LoadSafetensors(hand)
	if err != nil {
		t.Fatal(err)
	}
	if emb := ts["emb"]; emb == nil || emb.Shape[0] != wholeModelRows {
		t.Fatalf("the hand-run job's file holds emb %v, want the whole table", emb)
	}
	heldOut := filepath.Join(dir, "held.tsv")
	ok(t, psgraph(t, "gen", "criteo", "-o", heldOut, "--rows", "4000", "--seed", "2"))
	ea := summary(t, psgraph(t, "eval", model, "--init-from", hand, "--data", heldOut))
	eb := summary(t, psgraph(t, "eval", model, "--init-from", trained, "--data", heldOut))
	t.Logf("eval of the hand-run job's model %v, of train's %v", ea, eb)
	for _, k := range []string{"loss", "auc", "acc"} {
		if ea[k] == nil || ea[k] != eb[k] {
			t.Errorf("eval %s: %v for the hand-run job's model, %v for train's; want equal", k, ea[k], eb[k])
		}
	}
}

// maxRSS is a finished process's peak resident memory in bytes, as it
// reported it (0 where it is not measured).
func maxRSS(p *proc) int64 { return p.peak.Bytes() }

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// A 2x2 CTR job with a held-out file, started role by role: trainer 0
// evaluates the held-out rows every eval_every steps and at the end,
// pulling the table rows each chunk looks up from the pservers, and its
// final numbers (an exact AUC over every held-out row) are those psgraph
// eval computes from the model it saved, to the bit. The table has
// 100,000 rows, not the example's million: its initialization on the
// pservers, trainer 0's save and eval's load of it were most of the
// test's CPU, and its size is no part of the claim.
func TestHandRunTableJobEvaluatesHeldOut(t *testing.T) {
	t.Parallel()
	held := filepath.Join(t.TempDir(), "held.tsv")
	ok(t, psgraph(t, "gen", "criteo", "-o", held, "--rows", "3000", "--seed", "2"))
	model := ctrExample(t, func(s string) string {
		s = smallCTRTable(t, s)
		s = strings.Replace(s, "  stream: true\n", "  stream: true\n  eval: {csv: "+held+"}\n", 1)
		return strings.Replace(s, "  steps: 780\n", "  steps: 780\n  eval_every: 20\n", 1)
	})
	dir := filepath.Dir(model)
	plan := filepath.Join(dir, "plan")
	ok(t, psgraph(t, "split", model, "--trainers", "2", "--pservers", "2", "-o", plan))
	addrs := []string{freeAddr(t), freeAddr(t)}
	env := []string{"PSGRAPH_TOKEN=test-token"}
	saved, metrics := filepath.Join(dir, "model.safetensors"), filepath.Join(dir, "metrics.jsonl")
	var ps []*proc
	for i, a := range addrs {
		ps = append(ps, start(t, fmt.Sprintf("pserver-%d", i), env, "run", "--role", "pserver", "--index", fmt.Sprint(i), "--plan", plan, "--listen", a))
	}
	t0 := start(t, "trainer-0", env, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pserver-endpoints", strings.Join(addrs, ","), "--steps", "60", "--save", saved, "--metrics", metrics)
	t1 := start(t, "trainer-1", env, "run", "--role", "trainer", "--index", "1", "--plan", plan, "--pserver-endpoints", strings.Join(addrs, ","), "--steps", "60")
	var r0 result
	for i, p := range append([]*proc{t0, t1}, ps...) {
		r := p.wait(t, 2*time.Minute)
		if r.code != 0 {
			t.Fatalf("%s exit %d\n%s", p.name, r.code, r.stderr)
		}
		if i == 0 {
			r0 = r
		}
	}
	s := summary(t, r0)
	e := summary(t, psgraph(t, "eval", model, "--init-from", saved))
	t.Logf("trainer 0's summary %v; eval of its model %v", s, e)
	if e["rows"] != 3000.0 || s["eval_rows"] != 3000.0 {
		t.Fatalf("eval evaluated %v rows, trainer 0 %v; want the 3000 held-out rows", e["rows"], s["eval_rows"])
	}
	for _, k := range []string{"loss", "auc", "acc"} {
		if s["eval_"+k] == nil || s["eval_"+k] != e[k] {
			t.Errorf("held-out %s: trainer 0 %v, psgraph eval of its model %v; want equal", k, s["eval_"+k], e[k])
		}
	}
	raw, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	var at []float64
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["eval_auc"] != nil {
			at = append(at, m["step"].(float64))
		}
	}
	if fmt.Sprint(at) != "[20 40 60]" {
		t.Errorf("trainer 0's metrics have eval lines at steps %v, want [20 40 60]", at)
	}
}
