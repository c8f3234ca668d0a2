package cmd_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// examples/ctr-dynamic.yaml runs as its comment says on a generated file
// whose vocabulary drifts (psgraph gen criteo --drift): the summary line
// reports the table (every admitted key is live or was evicted), --save
// writes it, psgraph eval reads it back, and psgraph split shards it by
// key.
func TestCTRDynamicExample(t *testing.T) {
	t.Parallel()
	file, data := ctrDynamicExample(t)
	dir := filepath.Dir(file)
	save := filepath.Join(dir, "model.safetensors")
	r := psgraph(t, "run", "--role", "local", file, "--steps", "70", "--save", save)
	if r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	var sum struct {
		Tables map[string]struct {
			Live       int64 `json:"live_rows"`
			Admitted   int64 `json:"admitted"`
			EvictedTTL int64 `json:"evicted_ttl"`
			Bytes      int64 `json:"bytes"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(lastLine(r.stdout)), &sum); err != nil {
		t.Fatalf("summary %q: %v", r.stdout, err)
	}
	emb := sum.Tables["emb"]
	if emb.Live <= 0 || emb.EvictedTTL <= 0 || emb.Admitted != emb.Live+emb.EvictedTTL || emb.Bytes <= 0 {
		t.Errorf("summary tables %+v: want live rows, ttl evictions, admitted = live + evicted", sum.Tables)
	}
	if r := psgraph(t, "eval", file, "--init-from", save, "--data", data); r.code != 0 || !strings.Contains(r.stdout, `"auc":`) {
		t.Errorf("eval: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = psgraph(t, "split", file, "--trainers", "2", "--pservers", "2", "-o", filepath.Join(dir, "plan"))
	if r.code != 0 || !strings.Contains(r.stdout, "a dynamic table: sharded by key over 2 pservers") {
		t.Errorf("split: exit %d, want 0 and the table sharded by key\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// ctrDynamicExample writes examples/ctr-dynamic.yaml reading a generated
// file of 20000 rows whose vocabulary drifts, with ttl_steps 20 (evictions
// within a test's steps); it returns the model and the data file.
func ctrDynamicExample(t *testing.T) (file, data string) {
	t.Helper()
	dir := t.TempDir()
	data = filepath.Join(dir, "drift.tsv")
	if r := psgraph(t, "gen", "criteo", "-o", data, "--rows", "20000", "--seed", "1", "--drift", "0.5"); r.code != 0 {
		t.Fatalf("gen: exit %d\n%s", r.code, r.stderr)
	}
	src, err := os.ReadFile(filepath.Join("..", "examples", "ctr-dynamic.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const path = "csv: data/ctr-drift.tsv"
	if !strings.Contains(string(src), path) {
		t.Fatalf("examples/ctr-dynamic.yaml has no %q", path)
	}
	model := strings.Replace(string(src), path, "csv: "+data, 1)
	model = strings.Replace(model, "ttl_steps: 2000", "ttl_steps: 20", 1) // evictions within the test's steps
	file = filepath.Join(dir, "ctr-dynamic.yaml")
	if err := os.WriteFile(file, []byte(model), 0o644); err != nil {
		t.Fatal(err)
	}
	return file, data
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return fmt.Sprint(lines[len(lines)-1])
}
