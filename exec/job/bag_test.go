package job

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/trainer"
	"github.com/psgraph/psgraph/partition"
)

// bagModel writes partition/testdata/split/bags-2x2's model (a table read
// by an embedding_bag of a history of up to 3 ids, a multi-valued column
// read as [batch, 3] padded with -1, and by a lookup_table of the item)
// with the given mode beside a generated data file whose histories are
// often shorter than 3 and sometimes empty.
func bagModel(t *testing.T, mode string) *dsl.Graph {
	t.Helper()
	src, err := os.ReadFile("../../partition/testdata/split/bags-2x2/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model := strings.Replace(string(src), "{mode: mean}", "{mode: "+mode+"}", 1)
	if model == string(src) && mode != "mean" {
		t.Fatal("the model has no {mode: mean} to replace")
	}
	rng := rand.New(rand.NewPCG(22, 1))
	var rows strings.Builder
	for r := range 96 {
		var hist []string
		for range 3 {
			if rng.IntN(3) == 0 || r%11 == 0 {
				continue // padding; every 11th row has no history at all
			}
			id := rng.IntN(60)
			hist = append(hist, fmt.Sprint(id*id%60)) // a few ids are frequent
		}
		fmt.Fprintf(&rows, "%s,%d,%d\n", strings.Join(hist, "|"), rng.IntN(60), rng.IntN(2))
	}
	if err := os.WriteFile(filepath.Join(dir, "ids.csv"), []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "model.yaml")
	if err := os.WriteFile(path, []byte(model), 0o644); err != nil {
		t.Fatal(err)
	}
	return load(t, path)
}

// A table read through embedding_bag (with padding) and lookup_table is
// sharded like a lookup table: the trainers fetch the rows of both ops'
// real ids, padding is fetched from no shard, and a sync job of N
// trainers with batch b equals local training with batch N*b, for each
// pooling mode.
func TestShardedBagTableEqualsLocalInmem(t *testing.T) {
	for _, c := range []struct {
		mode string
		n, m int
	}{{"sum", 2, 2}, {"mean", 2, 2}, {"sqrtn", 1, 2}} {
		t.Run(fmt.Sprintf("%s/%dx%d", c.mode, c.n, c.m), func(t *testing.T) {
			g := bagModel(t, c.mode)
			local := filepath.Join(t.TempDir(), "local.safetensors")
			if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 25, Batch: 8 * c.n, Save: local, Log: zerolog.Nop()}); err != nil {
				t.Fatal(err)
			}
			dist := runPaddedTableJob(t, g, c.n, c.m, trainer.RunOptions{Steps: 25, Batch: 8, Log: zerolog.Nop()})
			compareParams(t, local, dist, 1e-4)
		})
	}
}

// runPaddedTableJob runs g split over n trainers and m pservers, through
// its plan files like a real job, and returns its merged model file.
func runPaddedTableJob(t *testing.T, g *dsl.Graph, n, m int, opt trainer.RunOptions) string {
	t.Helper()
	dir := t.TempDir()
	plan, err := partition.Split(g, partition.Options{Trainers: n, PServers: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := plan.Write(filepath.Join(dir, "plan")); err != nil {
		t.Fatal(err)
	}
	back, err := partition.ReadPlan(filepath.Join(dir, "plan"))
	if err != nil {
		t.Fatal(err)
	}
	shardDir = dir
	defer func() { shardDir = "" }()
	opt.Save = filepath.Join(dir, "trainer.safetensors")
	j := &Job{Trainer: back.Trainer, PServers: back.PServers, Trainers: n, Params: back.Info.ServedParams()}
	runJobInmem(t, j, opt)
	var shards []string
	for i := range m {
		shards = append(shards, filepath.Join(dir, fmt.Sprintf("pserver-%d.safetensors", i)))
	}
	out := filepath.Join(dir, "model.safetensors")
	if err := mergeShards(out, opt.Save, back.PServers, shards); err != nil {
		t.Fatal(err)
	}
	return out
}
