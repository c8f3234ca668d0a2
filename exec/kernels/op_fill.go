package kernels

// fill sets every element to one value.

func init() {
	register("fill", func(k Args) (Kernel, error) {
		y, v := k.Out[0], float32(k.Attrs.Float("value"))
		return func(Runtime) error {
			for i := range y.F {
				y.F[i] = v
			}
			return nil
		}, nil
	})
}
