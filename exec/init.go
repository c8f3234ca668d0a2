package exec

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
// placement never changes the initial model.
func Initialize(t *tensor.Tensor, in *dsl.Init, name string, fullShape tensor.Shape, rowStart, rowStep int) error {
	if t.DType != tensor.F32 {
		if in.Type != "zeros" {
			return fmt.Errorf("%s: initializer %s needs a float32 variable", name, in.Type)
		}
		clear(t.I)
		return nil
	}
	if fullShape == nil {
		fullShape = t.Shape
	}
	rowLen := 1
	if len(fullShape) > 1 {
		rowLen = fullShape[1:].Numel()
	}
	skip := rowStart * rowLen
	fanIn, fanOut := fans(fullShape)
	seed := uint64(in.Attrs.Int("seed"))
	if !in.Attrs.Has("seed") {
		h := fnv.New64a()
		h.Write([]byte(name))
		seed = h.Sum64()
	}
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
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
	for i := 0; i < skip; i++ {
		gen()
	}
	if rowStep <= 1 {
		for i := range t.F {
			t.F[i] = float32(gen())
		}
		return nil
	}
	// Every rowStep-th row: the values between are drawn and dropped.
	for i := 0; i < len(t.F); i += rowLen {
		if i > 0 {
			for j := 0; j < (rowStep-1)*rowLen; j++ {
				gen()
			}
		}
		for j := range rowLen {
			t.F[i+j] = float32(gen())
		}
	}
	return nil
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
