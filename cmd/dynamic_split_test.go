package cmd_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/psgraph/psgraph/exec/modelfile"
)

// examples/ctr-dynamic.yaml trains as a 2x2 job over real loopback
// sockets, sync and async: psgraph train, and in sync mode the same plan
// started role by role, as the Kubernetes manifests start it, each
// trainer 0 saving the whole table (keys and rows from both pservers);
// the sync runs save the same file byte for byte (the job is
// deterministic), and psgraph eval and predict read it.
func TestTrainCTRDynamicSplit(t *testing.T) {
	file, data := ctrDynamicExample(t)
	dir := filepath.Dir(file)
	const steps = "30"
	for _, mode := range []string{"sync", "async"} {
		save := filepath.Join(dir, mode+".safetensors")
		r := psgraph(t, "train", file, "--trainers", "2", "--pservers", "2", "--mode", mode, "--steps", steps, "--save", save)
		if r.code != 0 {
			t.Fatalf("train --mode %s: exit %d\n%s", mode, r.code, r.stderr)
		}
		ts, _, err := modelfile.LoadSafetensors(save)
		if err != nil {
			t.Fatal(err)
		}
		keys, rows := ts["emb.keys"], ts["emb"]
		if keys == nil || rows == nil || len(keys.L) == 0 || rows.Shape[0] != len(keys.L) || rows.Shape[1] != 16 {
			t.Fatalf("%s: saved emb.keys %v, emb %v; want the live keys and their rows", mode, keys, rows)
		}
		if r := psgraph(t, "eval", file, "--init-from", save, "--data", data); r.code != 0 || !strings.Contains(r.stdout, `"auc":`) {
			t.Errorf("eval of the %s job's model: exit %d\n%s%s", mode, r.code, r.stdout, r.stderr)
		}
	}
	if r := psgraph(t, "predict", file, "--init-from", filepath.Join(dir, "sync.safetensors"), "--data", data, "-o", filepath.Join(dir, "pred.csv")); r.code != 0 {
		t.Errorf("predict: exit %d\n%s", r.code, r.stderr)
	}

	plan := filepath.Join(dir, "plan")
	ok(t, psgraph(t, "split", file, "--trainers", "2", "--pservers", "2", "-o", plan))
	addrs := []string{freeAddr(t), freeAddr(t)}
	env := []string{"PSGRAPH_TOKEN=test-token"}
	hand := filepath.Join(dir, "hand.safetensors")
	var ps []*proc
	for i, a := range addrs {
		ps = append(ps, start(t, fmt.Sprintf("pserver-%d", i), env, "run", "--role", "pserver", "--index", fmt.Sprint(i), "--plan", plan, "--listen", a))
	}
	t0 := start(t, "trainer-0", env, "run", "--role", "trainer", "--index", "0", "--plan", plan, "--pserver-endpoints", strings.Join(addrs, ","), "--steps", steps, "--save", hand)
	t1 := start(t, "trainer-1", env, "run", "--role", "trainer", "--index", "1", "--plan", plan, "--pserver-endpoints", strings.Join(addrs, ","), "--steps", steps)
	live := 0
	for _, p := range append([]*proc{t0, t1}, ps...) {
		r := p.wait(t, 3*time.Minute)
		if r.code != 0 {
			t.Fatalf("%s exit %d\n%s", p.name, r.code, r.stderr)
		}
		if strings.HasPrefix(p.name, "pserver") {
			s := summary(t, r)
			tables, _ := s["tables"].(map[string]any)
			emb, _ := tables["emb"].(map[string]any)
			n, _ := emb["live_rows"].(float64)
			if n <= 0 {
				t.Errorf("%s's summary holds no live rows of emb: %v", p.name, s)
			}
			live += int(n)
		}
	}
	a, err := os.ReadFile(hand)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "sync.safetensors"))
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
	if n := len(ts["emb.keys"].L); n != live {
		t.Errorf("the file holds %d keys, the pservers' summaries count %d live rows", n, live)
	}
}
