package kernels

import (
	"fmt"
	"math/bits"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/tensor"
)

// cast, hash_cross and arange_like. Ids are int32 (tensor.I); ids and
// idAt are the one place that reads them.

// ids returns the id values of t.
func ids(t *tensor.Tensor) []int32 { return t.I }

// idAt widens an id to the 64-bit integer the cross hash absorbs, so a
// cross keeps its value when ids widen.
func idAt(v []int32, i int) int64 { return int64(v[i]) }

func init() {
	register("cast", func(k Args) (Kernel, error) {
		x, y := k.In[0], k.Out[0]
		if y.DType == ir.F32 {
			return func(Runtime) error {
				for i, v := range ids(x) {
					y.F[i] = float32(v)
				}
				return nil
			}, nil
		}
		out := ids(y)
		return func(Runtime) error {
			for i, v := range x.F {
				// Rounding toward zero: in range when -2^31-1 < v < 2^31.
				if f := float64(v); !(f > -2147483649 && f < 2147483648) {
					return fmt.Errorf("element %d is %g, which is not an int32 (NaN, or outside [-2^31, 2^31))", i, v)
				}
				out[i] = int32(v)
			}
			return nil
		}, nil
	})
	register("hash_cross", func(k Args) (Kernel, error) {
		y := ids(k.Out[0])
		in := k.In
		salt, buckets := uint64(int64(k.Attrs.Int("salt"))), uint64(k.Attrs.Int("buckets"))
		return func(Runtime) error {
			for r := range y {
				h := crossStart(salt)
				for _, x := range in {
					v, w := ids(x), x.RowWidth()
					for j := r * w; j < (r+1)*w; j++ {
						h = crossAbsorb(h, idAt(v, j))
					}
				}
				y[r] = int32(crossBucket(h, buckets))
			}
			return nil
		}, nil
	})
	register("arange_like", func(k Args) (Kernel, error) {
		y := ids(k.Out[0])
		return func(Runtime) error {
			for i := range y {
				y[i] = int32(i)
			}
			return nil
		}, nil
	})
}

// The hash of hash_cross (docs/dsl.md, "hash_cross"): splitmix64 absorbing
// the salt, then each value, and the high 64 bits of h * buckets.
const crossGamma = 0x9e3779b97f4a7c15

// crossMix is splitmix64's finalizer, a bijection of uint64.
func crossMix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// crossStart is the hash state of a cross with salt (an int64's bits).
func crossStart(salt uint64) uint64 { return crossMix(salt + crossGamma) }

// crossAbsorb adds one value to the state.
func crossAbsorb(h uint64, v int64) uint64 { return crossMix(h + crossGamma + uint64(v)) }

// crossBucket maps the state onto [0, buckets) without a division.
func crossBucket(h, buckets uint64) uint64 {
	hi, _ := bits.Mul64(h, buckets)
	return hi
}
