package job

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/data/criteo"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/internal/testfix"
)

// ctrRun is one of BenchmarkCTRDynamicVsFixed's models, compiled, fed
// from its own stream of the file.
type ctrRun struct {
	p    *program.Program
	fs   data.Batches
	feed *program.Feeder
	rt   *program.Runtime
	b    int64
	next int
}

// step runs the model's next step.
func (r *ctrRun) step(b *testing.B) {
	if err := r.feed.Fill(r.fs, int64(r.next)*r.b); err != nil {
		b.Fatal(err)
	}
	r.rt.StepNum = int64(r.next)
	if err := r.p.Run(r.rt); err != nil {
		b.Fatal(err)
	}
	r.next++
}

// ctrModels writes the benchmarks' file (600,000 rows of a 2,000,000-id
// vocabulary) and returns the sources of their models by name.
func ctrModels(b *testing.B, dir string) map[string]string {
	f, err := os.Create(filepath.Join(dir, "ctr.tsv"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := criteo.Generate(f, criteo.Options{Rows: 600000, Seed: 1, Vocab: 2000000}); err != nil {
		b.Fatal(err)
	}
	f.Close()
	fixed, err := os.ReadFile("../../examples/ctr.yaml")
	if err != nil {
		b.Fatal(err)
	}
	dynamic, err := os.ReadFile("../../examples/ctr-dynamic.yaml")
	if err != nil {
		b.Fatal(err)
	}
	return map[string]string{
		"fixed-10M":    strings.NewReplacer("hash_buckets: 1000000", "hash_buckets: 10000000", "[1000000, 16]", "[10000000, 16]", "csv: data/ctr.tsv", "csv: ctr.tsv").Replace(string(fixed)),
		"dynamic-min1": strings.NewReplacer("min_count: 2, ttl_steps: 2000", "min_count: 1", "csv: data/ctr-drift.tsv", "csv: ctr.tsv").Replace(string(dynamic)),
		"dynamic-min2": strings.NewReplacer("ttl_steps: 2000", "ttl_steps: 0", "csv: data/ctr-drift.tsv", "csv: ctr.tsv").Replace(string(dynamic)),
	}
}

// newCTRRun compiles and initializes model src and runs its first 20
// steps.
func newCTRRun(b *testing.B, path, src string) *ctrRun {
	g := sparseModelAt(b, path, []byte(src))
	p, err := program.Compile(g, program.CompileOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	if err := program.Init(p, program.InitOptions{From: ""}); err != nil {
		b.Fatal(err)
	}
	fs, err := data.OpenStream(g.Data)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fs.Close() })
	r := &ctrRun{p: p, fs: fs, feed: program.NewFeeder(g, p.Scope), rt: &program.Runtime{Ctx: context.Background()}, b: int64(g.Train.Batch)}
	for range 20 {
		r.step(b)
	}
	return r
}

// BenchmarkCTRDynamicVsFixed is examples/ctr-dynamic.yaml (no ttl; min_count
// 1 and 2) beside examples/ctr.yaml with a 10,000,000-bucket table, on
// 600,000 generated rows of a 2,000,000-id vocabulary, streamed: steps/s,
// CPU time per step, and the table's live rows at the end (the fixed
// table: its rows). Run it with a fixed count: -benchtime 2000x.
func BenchmarkCTRDynamicVsFixed(b *testing.B) {
	dir := b.TempDir()
	models := ctrModels(b, dir)
	for _, name := range []string{"fixed-10M", "dynamic-min1", "dynamic-min2"} {
		b.Run(name, func(b *testing.B) {
			r := newCTRRun(b, filepath.Join(dir, name+".yaml"), models[name])
			cpu0 := testfix.ProcessCPU()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				r.step(b)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
			b.ReportMetric(float64((testfix.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/step")
			if t := r.p.Tables["emb"]; t != nil {
				b.ReportMetric(float64(t.Stats().Live), "live-rows")
			}
		})
	}
}

// BenchmarkCTRDynamicVsFixedInterleaved runs BenchmarkCTRDynamicVsFixed's
// fixed-10M and dynamic-min1 models in one process, alternating blocks
// of 50 steps, b.N steps each, so that the load of a shared machine
// weighs on both alike: the process's CPU time per step of each and
// their ratio, dynamic over fixed (the target, steps/s >= 0.8x the fixed
// table's, is a ratio <= 1.25). Run it with -benchtime 2000x.
func BenchmarkCTRDynamicVsFixedInterleaved(b *testing.B) {
	dir := b.TempDir()
	models := ctrModels(b, dir)
	fixed := newCTRRun(b, filepath.Join(dir, "fixed.yaml"), models["fixed-10M"])
	dynamic := newCTRRun(b, filepath.Join(dir, "dynamic.yaml"), models["dynamic-min1"])
	var cpu [2]time.Duration
	b.ResetTimer()
	for lo := 0; lo < b.N; lo += 50 {
		for i, r := range []*ctrRun{fixed, dynamic} {
			c0 := testfix.ProcessCPU()
			for range min(50, b.N-lo) {
				r.step(b)
			}
			cpu[i] += testfix.ProcessCPU() - c0
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu[0].Microseconds())/float64(b.N), "fixed-cpu-us/step")
	b.ReportMetric(float64(cpu[1].Microseconds())/float64(b.N), "dynamic-cpu-us/step")
	b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "dynamic/fixed")
}
