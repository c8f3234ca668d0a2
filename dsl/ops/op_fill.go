package ops

import "github.com/psgraph/psgraph/dsl/ir"

func init() {
	register(&Def{
		Name: "fill", Doc: "y = a float32 tensor of the given shape with every element set to value",
		Outputs: []string{"y"},
		Attrs: []AttrSpec{
			{Name: "value", Kind: AttrFloat, Required: true},
			{Name: "shape", Kind: AttrInts, Default: []int{}, Doc: "dimensions; [] is a scalar"},
		},
		Infer: func(_ []Type, a Attrs) ([]Type, error) {
			s := ir.Shape(a.Ints("shape")).Clone()
			for _, d := range s {
				if d <= 0 {
					return nil, Errorf("shape %v must have positive dimensions", s)
				}
			}
			return []Type{{DType: ir.F32, Shape: s}}, nil
		},
	})
}
