package program

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/tensor"
)

// Initialize fills t with the initializer's values for variable name. When
// t holds only rows rowStart, rowStart+rowStep, ... of a parameter of
// fullShape (a block cut or a table sharded by the graph converter), it
// gets exactly those rows of the values the whole parameter would get, so
// placement never changes the initial model. Random initializers draw each
// row from its own stream, seeded by (seed, row): a pserver holding a few
// rows of a billion-row table draws only those.
func Initialize(t *tensor.Tensor, in *dsl.Init, name string, fullShape tensor.Shape, rowStart, rowStep int) error {
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
	seed := uint64(in.Attrs.Int("seed"))
	if !in.Attrs.Has("seed") {
		h := fnv.New64a()
		h.Write([]byte(name))
		seed = h.Sum64()
	}
	pcg := rand.NewPCG(0, 0)
	r := rand.New(pcg)
	var gen func() float64
	switch in.Type {
	case "zeros":
		clear(t.F)
		return nil
	case "constant":
		v := float32(in.Attrs.Float("value"))
		for i := range t.F {
			t.F[i] = v
		}
		return nil
	case "uniform":
		lo, hi := in.Attrs.Float("min"), in.Attrs.Float("max")
		gen = func() float64 { return lo + (hi-lo)*r.Float64() }
	case "normal":
		mean, std := in.Attrs.Float("mean"), in.Attrs.Float("std")
		gen = func() float64 { return mean + std*r.NormFloat64() }
	case "he_normal":
		std := math.Sqrt(2 / float64(fanIn))
		gen = func() float64 { return std * r.NormFloat64() }
	case "xavier_uniform":
		lim := math.Sqrt(6 / float64(fanIn+fanOut))
		gen = func() float64 { return lim * (2*r.Float64() - 1) }
	default:
		return fmt.Errorf("%s: unknown initializer %q", name, in.Type)
	}
	step := max(rowStep, 1)
	for i := 0; i*rowLen < len(t.F); i++ {
		pcg.Seed(seed, rowStream(uint64(rowStart+i*step)))
		for j := range rowLen {
			t.F[i*rowLen+j] = float32(gen())
		}
	}
	return nil
}

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
