package kernels

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/tensor"
)

// cast, hash_cross and arange_like. Ids are int32 (tensor.I) or int64
// keys (tensor.L); idAt is the one place that reads either.

// idAt is element i of t, int32 ids or int64 keys, as the int64 the cross
// hash absorbs and casts convert: int32 and int64 ids share the kernels,
// and a cross keeps its value when ids widen.
func idAt(t *tensor.Tensor, i int) int64 {
	if t.DType == tensor.I64 {
		return t.L[i]
	}
	return int64(t.I[i])
}

func init() {
	register("cast", castKernel)
	register("hash_cross", func(k Args) (Kernel, error) {
		y, in := k.Out[0], k.In
		salt := uint64(int64(k.Attrs.Int("salt")))
		if y.DType == tensor.I64 {
			return func(Runtime) error {
				for r := range y.L {
					y.L[r] = ir.HashKey(crossRow(in, salt, r))
				}
				return nil
			}, nil
		}
		buckets := uint64(k.Attrs.Int("buckets"))
		return func(Runtime) error {
			for r := range y.I {
				y.I[r] = int32(crossBucket(crossRow(in, salt, r), buckets))
			}
			return nil
		}, nil
	})
	register("arange_like", func(k Args) (Kernel, error) {
		y := k.Out[0]
		return func(Runtime) error {
			for i := range y.I {
				y.I[i] = int32(i)
			}
			return nil
		}, nil
	})
}

// castKernel converts between float32, int32 and int64. A float becomes
// an integer rounding toward zero; a value the target cannot hold stops
// the run naming the element.
func castKernel(k Args) (Kernel, error) {
	x, y := k.In[0], k.Out[0]
	switch {
	case y.DType == tensor.F32:
		return func(Runtime) error {
			for i := range y.F {
				y.F[i] = float32(idAt(x, i)) // round to nearest, as torch
			}
			return nil
		}, nil
	case x.DType == tensor.F32 && y.DType == tensor.I32:
		return func(Runtime) error {
			for i, v := range x.F {
				// Rounding toward zero: in range when -2^31-1 < v < 2^31.
				if f := float64(v); !(f > -2147483649 && f < 2147483648) {
					return fmt.Errorf("element %d is %g, which is not an int32 (NaN, or outside [-2^31, 2^31))", i, v)
				}
				y.I[i] = int32(v)
			}
			return nil
		}, nil
	case x.DType == tensor.F32:
		return func(Runtime) error {
			for i, v := range x.F {
				// The float32s in range are those below 2^63 in magnitude
				// and -2^63 itself (the next float32 below is far from it).
				if f := float64(v); !(f >= -9223372036854775808 && f < 9223372036854775808) {
					return fmt.Errorf("element %d is %g, which is not an int64 (NaN, or outside [-2^63, 2^63))", i, v)
				}
				y.L[i] = int64(v)
			}
			return nil
		}, nil
	case y.DType == tensor.I64:
		return func(Runtime) error {
			for i, v := range x.I {
				y.L[i] = int64(v)
			}
			return nil
		}, nil
	}
	return func(Runtime) error {
		for i, v := range x.L {
			if v < math.MinInt32 || v > math.MaxInt32 {
				return fmt.Errorf("element %d is %d, which is not an int32 (outside [-2^31, 2^31)); 64-bit keys map onto int32 ids with hash_cross (buckets: N), not cast", i, v)
			}
			y.I[i] = int32(v)
		}
		return nil
	}, nil
}

// crossRow is the cross hash of row r of the inputs: the salt, then each
// input's values of row r in order.
func crossRow(in []*tensor.Tensor, salt uint64, r int) uint64 {
	h := crossStart(salt)
	for _, x := range in {
		w := x.RowWidth()
		for j := r * w; j < (r+1)*w; j++ {
			h = crossAbsorb(h, idAt(x, j))
		}
	}
	return h
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
