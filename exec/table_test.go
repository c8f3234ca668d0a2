package exec

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/partition"
)

// runTableJob runs a sharded-table job in process and merges the saved
// shards with trainer 0's file into one model file, which it returns.
func runTableJob(t *testing.T, g *dsl.Graph, n, m int, async bool, opt RunOptions) string {
	t.Helper()
	dir := t.TempDir()
	shardDir = dir
	defer func() { shardDir = "" }()
	opt.Save = filepath.Join(dir, "trainer.safetensors")
	runInmemJob(t, g, n, m, async, opt, 0)
	plan, err := partition.Split(g, partition.Options{Trainers: n, PServers: m})
	if err != nil {
		t.Fatal(err)
	}
	var shards []string
	for i := range m {
		shards = append(shards, filepath.Join(dir, fmt.Sprintf("pserver-%d.safetensors", i)))
	}
	out := filepath.Join(dir, "model.safetensors")
	if err := MergeShards(out, opt.Save, plan.PServers, shards); err != nil {
		t.Fatal(err)
	}
	return out
}

// A table sharded by row id over M pservers and fetched by id trains
// exactly what local training does: N trainers with batch b against one
// node with batch N*b, for sgd, adagrad and adam (the row-wise update runs
// on each shard's rows; sync pservers average the row gradients).
func TestShardedTableEqualsLocalInmem(t *testing.T) {
	for _, opt := range []string{"sgd", "adagrad", "adam"} {
		for _, c := range []struct{ n, m int }{{1, 1}, {2, 2}, {2, 3}} {
			t.Run(fmt.Sprintf("%s/%dx%d", opt, c.n, c.m), func(t *testing.T) {
				path := "../testdata/sparse/emb-" + opt + ".yaml"
				g := load(t, path)
				init := "../testdata/sparse/init.safetensors"
				local := filepath.Join(t.TempDir(), "local.safetensors")
				if _, err := Train(context.Background(), g, RunOptions{Role: "local", Steps: 30, Batch: 8 * c.n, InitFrom: init, Save: local, Log: zerolog.Nop()}); err != nil {
					t.Fatal(err)
				}
				dist := runTableJob(t, g, c.n, c.m, false, RunOptions{Steps: 30, Batch: 8, InitFrom: init, Log: zerolog.Nop()})
				compareParams(t, local, dist, 1e-4)
			})
		}
	}
}
