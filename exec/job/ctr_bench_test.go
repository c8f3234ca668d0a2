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
	"github.com/psgraph/psgraph/internal/testfix"
)

// BenchmarkCTRExample10M is a local step of examples/ctr.yaml with its
// table at 10,000,000 x 16 (hash_buckets 10,000,000) on 600,000 generated
// Criteo rows, streamed from the file as the example reads it: the job of
// bench/history-2026-12.md's step-time budget (bench/ctr_example_torch.py is
// the same model in PyTorch). Setup writes the file (140 MB) and draws
// the table, so run it with a fixed count: -benchtime 2000x. Besides
// steps/s it reports the process's CPU time per step (user + system),
// which other jobs sharing the cores move less than the wall clock, and
// the distinct table rows a step updates.
func BenchmarkCTRExample10M(b *testing.B) {
	src, err := os.ReadFile("../../examples/ctr.yaml")
	if err != nil {
		b.Fatal(err)
	}
	model := strings.NewReplacer("hash_buckets: 1000000", "hash_buckets: 10000000", "[1000000, 16]", "[10000000, 16]").Replace(string(src))
	dir := b.TempDir()
	f, err := os.Create(filepath.Join(dir, "ctr.tsv"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := criteo.Generate(f, criteo.Options{Rows: 600000, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	f.Close()
	g := sparseModelAt(b, filepath.Join(dir, "ctr.yaml"), []byte(strings.Replace(model, "csv: data/ctr.tsv", "csv: ctr.tsv", 1)))
	p, err := program.Compile(g, program.CompileOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	if err := program.Init(p, program.InitOptions{From: ""}); err != nil {
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
	for k := range 20 { // warm up: first touches of the optimizer state
		step(k)
	}
	cpu0 := testfix.ProcessCPU()
	unique := 0
	b.ReportAllocs()
	b.ResetTimer()
	for k := range b.N {
		step(20 + k)
		unique += len(p.Scope["emb@GRAD"].Rows.IDs)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
	b.ReportMetric(float64(unique)/float64(b.N), "unique-ids/step")
	b.ReportMetric(float64((testfix.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/step")
}
