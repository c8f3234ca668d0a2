package exec

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
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

// A trainer of a sharded-table job moves rows, not tables: per step it
// sends each shard the unique ids it owns (4 bytes each) and their row
// gradients (4 + 4*D bytes each), and receives those rows (4*D bytes
// each), besides the dense parameters. Every node's summary counts
// exactly that, computed here from the data the trainers read.
func TestTableTrafficIsRowsInmem(t *testing.T) {
	const n, m, batch, steps, d = 2, 2, 8, 20, 4
	g := load(t, "../testdata/sparse/emb-adagrad.yaml")
	set, err := data.Load(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	dense := int64(4 * g.Types["W"].Shape.Numel())
	served = nil
	sums := runInmemJob(t, g, n, m, false, RunOptions{Steps: steps, Batch: batch, Log: zerolog.Nop()}, 0)
	var pserverRecv int64
	for _, s := range served {
		pserverRecv += s.RecvBytes
	}
	var trainersSent int64
	for ti, s := range sums {
		var ids, worst int64
		for k := 0; k < steps; k++ {
			seen := map[int32]bool{}
			for r := 0; r < batch; r++ {
				row := (k*n*batch + ti*batch + r) % set.Rows
				for _, id := range set.IDs[row*set.NI : (row+1)*set.NI] {
					seen[id] = true
				}
			}
			ids += int64(len(seen))
			worst = max(worst, int64(len(seen)))
		}
		pos, res := int64(positionSpec.Bytes), int64(resumeSpec.Bytes)
		wantSent := 4*ids + 4*ids*(1+d) + steps*dense + m*pos
		wantRecv := 4*ids*d + (steps+1)*dense + m*res
		if s.SentBytes != wantSent || s.RecvBytes != wantRecv {
			t.Errorf("trainer-%d: sent %d, received %d; %d unique ids over %d steps mean %d and %d", ti, s.SentBytes, s.RecvBytes, ids, steps, wantSent, wantRecv)
		}
		// issue 13's bound, per step: 2 x (unique ids x (4*D + 8)) + 64 KiB
		if per := (s.SentBytes + s.RecvBytes) / steps; per > 2*worst*(4*d+8)+64<<10 {
			t.Errorf("trainer-%d moves %d bytes per step, above the bound for %d unique ids", ti, per, worst)
		}
		trainersSent += s.SentBytes
	}
	if pserverRecv != trainersSent {
		t.Errorf("the pservers received %d bytes, the trainers sent %d", pserverRecv, trainersSent)
	}
}

// Two tables (one read by two lookups) and a dense layer, from their
// initializers: the shards of a pserver start with the rows the whole
// table gets locally, so the job equals local training from the start.
func TestTwoTablesEqualLocalInmem(t *testing.T) {
	g := load(t, "../partition/testdata/split/tables-2x3/model.yaml")
	local := filepath.Join(t.TempDir(), "local.safetensors")
	if _, err := Train(context.Background(), g, RunOptions{Role: "local", Steps: 25, Batch: 16, Save: local, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	dist := runTableJob(t, g, 2, 3, false, RunOptions{Steps: 25, Batch: 8, Log: zerolog.Nop()})
	compareParams(t, local, dist, 1e-4)
}

// A 2x1 sync job of the sparse-table models (2 trainers x batch 8 = the
// references' batch 16) ends where torch's sparse path ends after 50 steps
// (testdata/sparse/gen_reference.py), as local training does.
func TestShardedTableMatchesTorch(t *testing.T) {
	for _, name := range []string{"sgd", "adagrad", "adam"} {
		t.Run(name, func(t *testing.T) {
			g := load(t, "../testdata/sparse/emb-"+name+".yaml")
			dist := runTableJob(t, g, 2, 1, false, RunOptions{Steps: 50, Batch: 8, InitFrom: "../testdata/sparse/init.safetensors", Log: zerolog.Nop()})
			compareParams(t, "../testdata/sparse/"+name+".safetensors", dist, 1e-3)
		})
	}
}

// A trainer of a table job cannot evaluate the whole data set (it holds
// only the rows it fetched): its summary's loss is the mean of the losses
// of its last 100 steps, as its --metrics file logged them.
func TestTableJobSummaryIsTailMean(t *testing.T) {
	g := load(t, "../testdata/sparse/emb-adagrad.yaml")
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	sums := runInmemJob(t, g, 2, 1, false, RunOptions{Steps: 130, Batch: 8, LogEvery: 1, Metrics: metrics, InitFrom: "../testdata/sparse/init.safetensors", Log: zerolog.Nop()}, 0)
	b, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 130 {
		t.Fatalf("%d metrics lines, want 130", len(lines))
	}
	var sum float64
	for _, l := range lines[30:] {
		var rec struct{ Loss float64 }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		sum += rec.Loss
	}
	first, last := lines[30], lines[129]
	if first == last {
		t.Fatal("the loss did not move; the test would not discriminate")
	}
	// the log writes 6 significant digits
	if want := sum / 100; math.Abs(sums[0].Loss-want) > 1e-5*math.Abs(want) {
		t.Fatalf("summary loss %v, the mean of the last 100 logged losses is %v", sums[0].Loss, want)
	}
}
