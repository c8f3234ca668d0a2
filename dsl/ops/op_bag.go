package ops

import (
	"slices"
	"strings"

	"github.com/psgraph/psgraph/dsl/ir"
)

// embedding_bag pools the rows of a multi-valued id field: each bag (the
// last axis of ids) is the sum, mean or sum / sqrt(count) of its rows,
// ids < 0 being padding. Its gradient for the table is a row gradient, as
// lookup_table's: each real id's row gets the bag's output gradient times
// the bag's weight (1, 1/count or 1/sqrt(count)).

// bagModes are embedding_bag's pooling modes.
var bagModes = []string{"sum", "mean", "sqrtn"}

func init() {
	modeAttr := AttrSpec{Name: "mode", Kind: AttrString, Default: "sum", Doc: "sum, mean (sum / count of real ids) or sqrtn (sum / sqrt(count))"}
	register(&Def{
		Name: "embedding_bag", Doc: "y[..., :] = the pooled rows of table [V, D] for the bag ids[..., :] (int32 [..., L]): their sum, mean or sum / sqrt(count); ids < 0 are padding and ignored, a bag without real ids gives zeros",
		Inputs: []string{"table", "ids"}, Outputs: []string{"y"},
		Attrs: []AttrSpec{modeAttr},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			table, ids := in[0], in[1]
			if err := checkBag(table, ids, a); err != nil {
				return nil, err
			}
			out := append(ids.Shape[:len(ids.Shape)-1].Clone(), table.Shape[1])
			return []Type{{DType: ir.F32, Shape: out}}, nil
		},
		Grad: func(b GradBuilder, g GradArgs) []string {
			return []string{b.Emit("embedding_bag_grad", []string{g.OutGrads[0], g.Inputs[1], g.Inputs[0]}, Attrs{"mode": g.Attrs.String("mode")}), ""}
		},
		SparseIn: true, ReadsTable: true,
	}, &Def{
		Name: "embedding_bag_grad", Doc: "dtable = the row gradient of table through embedding_bag: each real id's row gets dy of its bag times the bag's weight, summed by id, each id once (row-sparse)", Internal: true,
		Inputs: []string{"dy", "ids", "table"}, Outputs: []string{"dtable"},
		Attrs: []AttrSpec{modeAttr},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			dy, ids, table := in[0], in[1], in[2]
			if err := checkBag(table, ids, a); err != nil {
				return nil, err
			}
			want := append(ids.Shape[:len(ids.Shape)-1].Clone(), table.Shape[1])
			if dy.DType != ir.F32 || dy.Sparse() || !dy.Shape.Equal(want) {
				return nil, Errorf("dy must be float32 %v (ids %v without its last axis, + [D] of table %v), got %v", want, ids.Shape, table.Shape, dy)
			}
			return []Type{tableRowGrad(table, ids)}, nil
		},
		SparseIn: true, RowGrad: true,
	})
}

func checkBag(table, ids Type, a Attrs) error {
	if err := checkTableIDs(table, ids); err != nil {
		return err
	}
	if ids.Sparse() || len(ids.Shape) < 2 {
		return Errorf("ids must be int32 [batch, L] (or [..., L]: the last axis holds a bag's ids), got %v", ids)
	}
	if m := a.String("mode"); !slices.Contains(bagModes, m) {
		return Errorf("mode %q is not one of %s", m, strings.Join(bagModes, ", "))
	}
	return nil
}
