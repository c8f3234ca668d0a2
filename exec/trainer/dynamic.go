package trainer

import (
	"fmt"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/program"
)

// checkDynamic refuses what a run of a model with dynamic tables cannot
// do yet: run split, or checkpoint them.
func checkDynamic(g *dsl.Graph, opt RunOptions) error {
	dyn := g.DynamicParams()
	if len(dyn) == 0 {
		return nil
	}
	pos := g.Vars[dyn[0]].Pos
	switch {
	case opt.Comm != nil:
		return dsl.Errorf(pos, "%s is a dynamic table, which a split job does not hold yet; train the model with psgraph run --role local", dyn[0])
	case opt.Checkpoint != nil:
		return dsl.Errorf(pos, "%s is a dynamic table, which checkpoints do not hold yet; train without --checkpoint-dir", dyn[0])
	}
	return nil
}

// saveTables adds each dynamic table's keys and rows to params, as a
// model file holds them (program.TableTensors), and returns names with
// the keys' tensors added.
func saveTables(p *program.Program, params program.Scope, names []string) ([]string, error) {
	for _, dt := range p.Lowered {
		keys, rows, err := program.TableTensors(p.Tables[dt.Name])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dt.Name, err)
		}
		params[dt.Name], params[program.KeysName(dt.Name)] = rows, keys
		names = append(names, program.KeysName(dt.Name))
	}
	return names, nil
}
