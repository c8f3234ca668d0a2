package trainer

import (
	"github.com/psgraph/psgraph/dsl"
)

// checkDynamic refuses what a run of a model with dynamic tables cannot
// do yet: save or load them, or checkpoint them.
func checkDynamic(g *dsl.Graph, opt RunOptions) error {
	dyn := g.DynamicParams()
	if len(dyn) == 0 {
		return nil
	}
	pos := g.Vars[dyn[0]].Pos
	switch {
	case opt.Comm != nil:
		return dsl.Errorf(pos, "%s is a dynamic table, which a split job does not hold yet; train the model with psgraph run --role local", dyn[0])
	case opt.Save != "":
		return dsl.Errorf(pos, "%s is a dynamic table, which --save does not write yet; train without --save", dyn[0])
	case opt.InitFrom != "":
		return dsl.Errorf(pos, "%s is a dynamic table, which --init-from does not read yet; train without --init-from", dyn[0])
	case opt.Checkpoint != nil:
		return dsl.Errorf(pos, "%s is a dynamic table, which checkpoints do not hold yet; train without --checkpoint-dir", dyn[0])
	}
	return nil
}
