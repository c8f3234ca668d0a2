package job

import (
	"bufio"
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/psgraph/psgraph/exec/program"

	"github.com/psgraph/psgraph/exec/data"
)

// ctrBenchModel is the sparse-table benchmark of bench/history-2026-12.md: 26 id
// columns into one 1,000,000 x 16 table, the embeddings concatenated, a
// 416 x 2 matmul, softmax cross entropy, batch 256, adagrad lr 0.05
// (bench/ctr-bench.yaml; bench/ctr_torch.py is the PyTorch side).
const ctrBenchModel = "../../bench/ctr-bench.yaml"

// writeZipfIDs writes rows of 26 Zipf(1.2) ids over [0, vocab) and a 0/1
// label, as bench/ctr-bench.yaml reads them.
func writeZipfIDs(tb testing.TB, path string, rows, vocab int, seed int64) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriter(f)
	r := rand.New(rand.NewSource(seed))
	z := rand.NewZipf(r, 1.2, 1, uint64(vocab-1))
	for i := 0; i < rows; i++ {
		first := z.Uint64()
		fmt.Fprint(w, first)
		for c := 1; c < 26; c++ {
			fmt.Fprintf(w, ",%d", z.Uint64())
		}
		fmt.Fprintf(w, ",%d\n", first%2)
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	f.Close()
}

// BenchmarkSparseTableStep is one local step of the sparse-table benchmark.
func BenchmarkSparseTableStep(b *testing.B) {
	src, err := os.ReadFile(ctrBenchModel)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	writeZipfIDs(b, filepath.Join(dir, "ids.csv"), 20000, 1000000, 1)
	g := sparseModelAt(b, filepath.Join(dir, "ctr-bench.yaml"), src)
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
	rows := 0
	b.ReportAllocs()
	b.ResetTimer()
	for k := 0; k < b.N; k++ {
		f.Fill(st, int64(k)*256)
		rt.StepNum = int64(k)
		if err := p.Run(rt); err != nil {
			b.Fatal(err)
		}
		rows += len(p.Scope["emb@GRAD"].Rows.IDs)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
	b.ReportMetric(float64(rows)/float64(b.N), "unique-ids/step")
}

// A steady-state step of a model with a row gradient allocates nothing:
// the dedup index, the row buffers and the row assigns reuse their memory.
func TestSparseStepDoesNotAllocate(t *testing.T) {
	for _, name := range []string{"adagrad", "adam"} {
		g := load(t, "../../testdata/sparse/emb-"+name+".yaml")
		p, err := program.Compile(g, program.CompileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := program.Init(p, program.InitOptions{From: "../../testdata/sparse/init.safetensors"}); err != nil {
			t.Fatal(err)
		}
		feed := newTestFeed(t, g, p)
		rt := &program.Runtime{Ctx: context.Background()}
		k := 0
		allocs := testing.AllocsPerRun(50, func() {
			feed(k)
			rt.StepNum = int64(k)
			if err := p.Run(rt); err != nil {
				t.Fatal(err)
			}
			k++
		})
		p.Close()
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per step, want 0", name, allocs)
		}
	}
}
