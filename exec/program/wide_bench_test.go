package program

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/internal/testfix"
)

// BenchmarkWideStep is the wide MLP 64-2048-10 at batch 256 (issue 7): the
// digits graph with a 2048-wide hidden layer.
func BenchmarkWideStep(b *testing.B) {
	src, err := os.ReadFile("../../examples/digits-mlp.yaml")
	if err != nil {
		b.Fatal(err)
	}
	csv, err := filepath.Abs("../../examples/data/digits.csv")
	if err != nil {
		b.Fatal(err)
	}
	y := strings.NewReplacer("[64, 128]", "[64, 2048]", "b1: {shape: [128]", "b1: {shape: [2048]",
		"[128, 10]", "[2048, 10]", "csv: data/digits.csv", "csv: "+csv).Replace(string(src))
	path := filepath.Join(b.TempDir(), "wide-mlp.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		b.Fatal(err)
	}
	g := testfix.Model(b, path)
	p, err := Compile(g, CompileOptions{Batch: 256})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	if err := Init(p, InitOptions{From: ""}); err != nil {
		b.Fatal(err)
	}
	set, err := data.Load(g.Data)
	if err != nil {
		b.Fatal(err)
	}
	f, st := NewFeeder(g, p.Scope), data.NewStream(set)
	rt := &Runtime{Ctx: context.Background()}
	b.ReportAllocs()
	b.ResetTimer()
	for k := 0; k < b.N; k++ {
		f.Fill(st, int64(k)*256)
		rt.StepNum = int64(k)
		if err := p.Run(rt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
}
