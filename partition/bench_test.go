package partition

import (
	"fmt"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/psgraph/psgraph/dsl"
)

// deepMLP is a deep narrow MLP: layers x (matmul, add, tanh) of width 8.
func deepMLP(tb testing.TB, layers int) *dsl.Graph {
	tb.Helper()
	widths := make([]int, layers+1)
	for i := range widths {
		widths[i] = 8
	}
	g, err := dsl.LoadBytes("deep.yaml", mixedModel(widths, "{type: momentum, lr: 0.01}"))
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

// BenchmarkSplit measures Split by model depth for 4 trainers and 8
// pservers; ns/op should grow about linearly with the layer count.
func BenchmarkSplit(b *testing.B) {
	for _, layers := range []int{10, 100, 1000} {
		g := deepMLP(b, layers)
		b.Run(fmt.Sprintf("layers=%d/ops=%d", layers, len(g.Ops)), func(b *testing.B) {
			for b.Loop() {
				if _, err := Split(g, Options{Trainers: 4, PServers: 8}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestDeepModelSplits(t *testing.T) {
	g := deepMLP(t, 50)
	p, err := Split(g, Options{Trainers: 4, PServers: 8})
	if err != nil {
		t.Fatal(err)
	}
	checkTransfers(t, p)
	checkBlocks(t, p)
	if got, want := len(p.Info.Transfers), 2*2*50; got != want {
		t.Errorf("%d transfers, want %d (a parameter and a gradient per weight and bias)", got, want)
	}
}

// BenchmarkSplitEndToEnd is what `psgraph split` does on a deep model of
// 33,333 layers (100k forward ops, about 500k with backward and optimizer),
// from the YAML bytes to the written files, for 4 trainers and 8 pservers.
// docs/split.md, Cost, gives its time (the target is under 5 s).
func BenchmarkSplitEndToEnd(b *testing.B) {
	widths := make([]int, 33333+1)
	for i := range widths {
		widths[i] = 8
	}
	src := mixedModel(widths, "{type: momentum, lr: 0.01}")
	dir := b.TempDir()
	defer debug.SetGCPercent(debug.SetGCPercent(1000)) // cmd/split.go's splitGCPercent
	for b.Loop() {
		g, err := dsl.LoadBytes("deep.yaml", src)
		if err != nil {
			b.Fatal(err)
		}
		p, err := Split(g, Options{Trainers: 4, PServers: 8})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Write(filepath.Join(dir, fmt.Sprint(b.N))); err != nil {
			b.Fatal(err)
		}
	}
}
