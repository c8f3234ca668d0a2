package job

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/data/criteo"
	"github.com/psgraph/psgraph/exec/program"
)

// BenchmarkCTRDynamicVsFixed is examples/ctr-dynamic.yaml (no ttl; min_count
// 1 and 2) beside examples/ctr.yaml with a 10,000,000-bucket table, on
// 600,000 generated rows of a 2,000,000-id vocabulary, streamed: steps/s,
// CPU time per step, and the table's live rows at the end (the fixed
// table: its rows). Run it with a fixed count: -benchtime 2000x.
func BenchmarkCTRDynamicVsFixed(b *testing.B) {
	dir := b.TempDir()
	f, err := os.Create(filepath.Join(dir, "ctr.tsv"))
	if err != nil {
		b.Fatal(err)
	}
	if err := criteo.Write(f, criteo.Options{Rows: 600000, Seed: 1, Vocab: 2000000}); err != nil {
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
	models := map[string]string{
		"fixed-10M":    strings.NewReplacer("hash_buckets: 1000000", "hash_buckets: 10000000", "[1000000, 16]", "[10000000, 16]", "csv: data/ctr.tsv", "csv: ctr.tsv").Replace(string(fixed)),
		"dynamic-min1": strings.NewReplacer("min_count: 2, ttl_steps: 2000", "min_count: 1", "csv: data/ctr-drift.tsv", "csv: ctr.tsv").Replace(string(dynamic)),
		"dynamic-min2": strings.NewReplacer("ttl_steps: 2000", "ttl_steps: 0", "csv: data/ctr-drift.tsv", "csv: ctr.tsv").Replace(string(dynamic)),
	}
	for _, name := range []string{"fixed-10M", "dynamic-min1", "dynamic-min2"} {
		b.Run(name, func(b *testing.B) {
			g := sparseModelAt(b, filepath.Join(dir, name+".yaml"), []byte(models[name]))
			p, err := program.Compile(g, program.CompileOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			if err := program.InitPersistent(p, ""); err != nil {
				b.Fatal(err)
			}
			fs, err := data.OpenStream(g.Data)
			if err != nil {
				b.Fatal(err)
			}
			defer fs.Close()
			feed := program.NewFeeder(g, p.Scope)
			rt := &program.Runtime{Ctx: context.Background()}
			batch := int64(g.Train.Batch)
			step := func(k int) {
				if err := feed.Fill(fs, int64(k)*batch); err != nil {
					b.Fatal(err)
				}
				rt.StepNum = int64(k)
				if err := p.Run(rt); err != nil {
					b.Fatal(err)
				}
			}
			for k := range 20 {
				step(k)
			}
			cpu0 := cpuTime()
			b.ReportAllocs()
			b.ResetTimer()
			for k := range b.N {
				step(20 + k)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/step")
			if t := p.Tables["emb"]; t != nil {
				b.ReportMetric(float64(t.Stats().Live), "live-rows")
			}
		})
	}
}
