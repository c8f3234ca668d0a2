package kernels

import "fmt"

// dropout and its gradient draw the same mask: element i of a trainer's
// tensor is kept when the hash of (seed, step, trainer*numel + i) is at
// least rate. A tensor whose dim 0 is the batch then gets, on trainer t
// of a job with batch b, the mask rows t*b... of the local run with batch
// n*b: distributed training draws what local training draws.

func init() {
	register("dropout", func(k Args) (Kernel, error) { return dropoutKernel(k, k.Inference) })
	register("dropout_grad", func(k Args) (Kernel, error) { return dropoutKernel(k, false) })
	register("binary_accuracy", func(k Args) (Kernel, error) {
		s, y, acc := k.In[0], k.In[1], k.Out[0]
		th := float32(k.Attrs.Float("threshold"))
		return func(Runtime) error {
			n := len(s.F)
			if n == 0 {
				acc.F[0] = 0
				return nil
			}
			hit := 0
			for i, v := range s.F {
				var one bool
				if y.I != nil {
					switch y.I[i] {
					case 0:
					case 1:
						one = true
					default:
						return fmt.Errorf("row %d: label %d is not 0 or 1: binary_accuracy is a binary metric (for C classes, use accuracy)", i, y.I[i])
					}
				} else {
					one = y.F[i] > 0.5
				}
				if (v > th) == one {
					hit++
				}
			}
			acc.F[0] = float32(hit) / float32(n)
			return nil
		}, nil
	})
}

func dropoutKernel(k Args, identity bool) (Kernel, error) {
	x, y := k.In[0], k.Out[0]
	rate := k.Attrs.Float("rate")
	if identity || rate == 0 {
		return func(Runtime) error { copy(y.F, x.F); return nil }, nil
	}
	seed := uint64(k.Attrs.Int("seed"))
	scale := float32(1 / (1 - rate))
	// keep when the hash's top 53 bits, as a fraction of 2^53, are >= rate
	cut := uint64(rate * (1 << 53))
	return func(rt Runtime) error {
		t := k.Node.Trainer
		key := mix64(seed*0x9e3779b97f4a7c15 ^ mix64(uint64(rt.Step())+0x632be59bd9b4e019))
		base := uint64(t) * uint64(len(x.F))
		for i, v := range x.F[:len(y.F)] {
			if mix64(key^(base+uint64(i))*0xbf58476d1ce4e5b9)>>11 >= cut {
				y.F[i] = v * scale
			} else {
				y.F[i] = 0
			}
		}
		return nil
	}, nil
}

// mix64 is splitmix64's finalizer.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
