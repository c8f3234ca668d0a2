package job

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/data/criteo"
	"github.com/psgraph/psgraph/exec/program"
)

// BenchmarkZooStep is one local training step of each model of the zoo
// (examples/dlrm.yaml, dcn-v2.yaml, deepfm.yaml, logreg.yaml) as written,
// tables of 100,000 rows included, on 20,000 rows of `psgraph gen criteo
// --vocab 1000 --truth fm` held in memory (bench/history-2026-12.md, "The
// model zoo"; bench/zoo_torch.py is the PyTorch side). It reports steps/s
// and allocations per step.
func BenchmarkZooStep(b *testing.B) {
	dir := b.TempDir()
	var buf bytes.Buffer
	if _, err := criteo.Generate(&buf, criteo.Options{Rows: 20000, Seed: 1, Vocab: 1000, Truth: "fm"}); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "zoo.tsv"), buf.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, model := range []string{"dlrm", "dcn-v2", "deepfm", "logreg"} {
		b.Run(model, func(b *testing.B) {
			src, err := os.ReadFile("../../examples/" + model + ".yaml")
			if err != nil {
				b.Fatal(err)
			}
			s := strings.Replace(string(src), "csv: data/zoo-train.tsv", "csv: zoo.tsv", 1)
			s = strings.Replace(s, "  eval: {csv: data/zoo-eval.tsv}\n", "", 1)
			s = strings.Replace(s, "  stream: true\n", "", 1)
			g := sparseModelAt(b, filepath.Join(dir, model+".yaml"), []byte(s))
			p, err := program.Compile(g, program.CompileOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			if err := program.Init(p, program.InitOptions{From: ""}); err != nil {
				b.Fatal(err)
			}
			loaded, err := data.LoadSplit(g.Data, nil)
			if err != nil {
				b.Fatal(err)
			}
			set := loaded.Train
			f, st := program.NewFeeder(g, p.Scope), data.NewStream(set)
			rt := &program.Runtime{Ctx: context.Background()}
			batch := int64(g.Batch())
			b.ReportAllocs()
			b.ResetTimer()
			for k := 0; k < b.N; k++ {
				f.Fill(st, int64(k)*batch)
				rt.StepNum = int64(k + 1)
				if err := p.Run(rt); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
		})
	}
}
