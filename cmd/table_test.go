package cmd_test

import (
	"path/filepath"
	"testing"

	"github.com/psgraph/psgraph/exec/modelfile"
)

// `psgraph train` of a model with a lookup table over real TCP processes:
// the table is sharded over both pservers, trainers fetch rows by id, and
// --save writes one model file (trainer 0's dense parameters and the
// pservers' shards, merged) equal to local training with batch N*b.
func TestTrainShardedTableEqualsLocal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dist, local := filepath.Join(dir, "dist.safetensors"), filepath.Join(dir, "local.safetensors")
	r := psgraph(t, "train", "testdata/sparse/emb-adam.yaml", "--trainers", "2", "--pservers", "2", "--steps", "40", "--batch", "8",
		"--init-from", "testdata/sparse/init.safetensors", "--save", dist)
	if r.code != 0 {
		t.Fatalf("train: exit %d\n%s", r.code, r.stderr)
	}
	if s := summary(t, r); s["role"] != "trainer-0" {
		t.Fatalf("train printed the summary of %v, want trainer-0's", s["role"])
	}
	r = psgraph(t, "run", "--role", "local", "testdata/sparse/emb-adam.yaml", "--steps", "40", "--batch", "16",
		"--init-from", "testdata/sparse/init.safetensors", "--save", local)
	if r.code != 0 {
		t.Fatalf("local: exit %d\n%s", r.code, r.stderr)
	}
	a, _, err := modelfile.LoadSafetensors(local)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := modelfile.LoadSafetensors(dist)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 2 || len(b) != 2 {
		t.Fatalf("local saved %d tensors, the job %d; want emb and W in both", len(a), len(b))
	}
	for name, x := range a {
		y := b[name]
		if y == nil || !y.Shape.Equal(x.Shape) {
			t.Fatalf("%s: the job saved %v, local %v", name, y, x.Shape)
		}
		for i := range x.F {
			if d := x.F[i] - y.F[i]; d > 1e-4 || d < -1e-4 {
				t.Fatalf("%s[%d]: job %v, local %v", name, i, y.F[i], x.F[i])
			}
		}
	}
}
