package program

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/blas"
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
	loaded, err := data.LoadSplit(g.Data, nil)
	if err != nil {
		b.Fatal(err)
	}
	set := loaded.Train
	// The GEMMs: x W1 and its weight gradient (2 x 256 x 64 x 2048 each),
	// h W2, its weight gradient and dh (2 x 256 x 2048 x 10 each); x is
	// data, so no gradient of x is computed.
	benchSteps(b, p, NewFeeder(g, p.Scope), data.NewStream(set), 256, 2*256*(2*64*2048+3*2048*10))
}

// benchSteps times steps of p fed batch rows each from st, in a
// sub-benchmark named by the CPU kernels that run them (blas.VecName:
// avx512, avx2 or go; GODEBUG=cpu.avx512f=off or -tags purego select the
// others), and reports steps/s and the GFLOP/s of its GEMMs, flops a step.
func benchSteps(b *testing.B, p *Program, f *Feeder, st *data.Stream, batch, flops int) {
	b.Run(blas.VecName(), func(b *testing.B) {
		rt := &Runtime{Ctx: context.Background()}
		b.ReportAllocs()
		for k := 0; b.Loop(); k++ {
			f.Fill(st, int64(k)*int64(batch))
			rt.StepNum = int64(k)
			if err := p.Run(rt); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
		b.ReportMetric(float64(flops)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GEMM-GFLOP/s")
	})
}
