package program

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/progress"
	"github.com/psgraph/psgraph/exec/tensor"
)

// Initialize fills t with the initializer's values for variable name. When
// t holds only rows rowStart, rowStart+rowStep, ... of a parameter of
// fullShape (a block cut or a table sharded by the graph converter), it
// gets exactly those rows of the values the whole parameter would get, so
// placement never changes the initial model. Random initializers draw each
// row from its own stream, seeded by (seed, row): a pserver holding a few
// rows of a billion-row table draws only those, and a large tensor's rows
// are drawn on every core (GOMAXPROCS) with the same values whatever their
// number (TestInitializeSameOnAnyCores). The values drawn are counted to
// ph (nil: none).
func Initialize(t *tensor.Tensor, in *dsl.Init, name string, fullShape tensor.Shape, rowStart, rowStep int, ph *progress.Phase) error {
	return initialize(t, in, name, fullShape, rowStart, rowStep, runtime.GOMAXPROCS(0), ph)
}

// initialize is Initialize on up to workers goroutines, counting the
// values drawn to ph (nil: none).
func initialize(t *tensor.Tensor, in *dsl.Init, name string, fullShape tensor.Shape, rowStart, rowStep, workers int, ph *progress.Phase) error {
	if t.DType != tensor.F32 {
		if in.Type != "zeros" {
			return fmt.Errorf("%s: initializer %s needs a float32 variable", name, in.Type)
		}
		clear(t.I)
		clear(t.L)
		return nil
	}
	if fullShape == nil {
		fullShape = t.Shape
	}
	rowLen := 1
	if len(fullShape) > 1 {
		rowLen = fullShape[1:].Numel()
	}
	fanIn, fanOut := fans(fullShape)
	seed := InitSeed(in, name)
	// fill writes rows [lo, hi) of t, each from its own stream.
	var fill func(r *rand.Rand, pcg *rand.PCG, lo, hi int)
	rows := func(pcg *rand.PCG, lo, hi int, draw func(row []float32)) {
		step := max(rowStep, 1)
		for i := lo; i < hi; i++ {
			pcg.Seed(seed, rowStream(uint64(rowStart+i*step)))
			draw(t.F[i*rowLen : min((i+1)*rowLen, len(t.F))])
		}
	}
	switch in.Type {
	case "zeros", "constant":
		v := float32(in.Attrs.Float("value")) // 0 for zeros
		fill = func(_ *rand.Rand, _ *rand.PCG, lo, hi int) {
			f := t.F[lo*rowLen : min(hi*rowLen, len(t.F))]
			if v == 0 {
				// Written, not only checked: a fresh tensor reads as the
				// kernel's zero page, and a table-sized optimizer state
				// left so took its pages as the steps first wrote its
				// rows, at random, a page fault inside a step for most
				// rows. Faulted in here in order, they cost less in all:
				// the 10M-row CTR example ran 10% more steps a second and
				// finished 5% sooner, start included (docs/performance.md,
				// "Huge pages and first touch").
				clear(f)
				return
			}
			for i := range f {
				f[i] = v
			}
		}
	case "uniform":
		lo, hi := in.Attrs.Float("min"), in.Attrs.Float("max")
		fill = func(r *rand.Rand, pcg *rand.PCG, a, b int) {
			rows(pcg, a, b, func(row []float32) {
				for j := range row {
					row[j] = float32(lo + (hi-lo)*r.Float64())
				}
			})
		}
	case "normal", "he_normal":
		mean, std := in.Attrs.Float("mean"), in.Attrs.Float("std")
		if in.Type == "he_normal" {
			mean, std = 0, math.Sqrt(2/float64(fanIn))
		}
		fill = func(r *rand.Rand, pcg *rand.PCG, a, b int) {
			rows(pcg, a, b, func(row []float32) {
				for j := range row {
					row[j] = float32(mean + std*r.NormFloat64())
				}
			})
		}
	case "xavier_uniform":
		lim := math.Sqrt(6 / float64(fanIn+fanOut))
		fill = func(r *rand.Rand, pcg *rand.PCG, a, b int) {
			rows(pcg, a, b, func(row []float32) {
				for j := range row {
					row[j] = float32(lim * (2*r.Float64() - 1))
				}
			})
		}
	default:
		return fmt.Errorf("%s: unknown initializer %q", name, in.Type)
	}
	n := (len(t.F) + rowLen - 1) / rowLen
	// Chunks of about initChunk values, taken in turn by the workers; a
	// chunk's rows are drawn from their own streams, so the values do not
	// depend on which worker draws them.
	chunk := max(1, initChunk/rowLen)
	chunks := (n + chunk - 1) / chunk
	workers = max(1, min(workers, chunks))
	var next atomic.Int64
	work := func() {
		pcg := rand.NewPCG(0, 0)
		r := rand.New(pcg)
		for {
			c := int(next.Add(1) - 1)
			if c >= chunks {
				return
			}
			lo, hi := c*chunk, min((c+1)*chunk, n)
			fill(r, pcg, lo, hi)
			ph.Add(int64(min(hi*rowLen, len(t.F)) - lo*rowLen))
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	return nil
}

// initChunk is about how many values one worker of Initialize draws at a
// time (and between two progress counts).
const initChunk = 1 << 18

// rowStream is the second PCG seed of a row: splitmix64's finalizer, so
// neighbouring rows get unrelated streams.
func rowStream(row uint64) uint64 {
	z := row + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// fans returns fan-in and fan-out for a weight of shape [in, out, ...].
func fans(s tensor.Shape) (int, int) {
	switch len(s) {
	case 0:
		return 1, 1
	case 1:
		return s[0], s[0]
	}
	rest := s[2:].Numel()
	return s[0] * rest, s[1] * rest
}
