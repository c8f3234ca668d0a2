package program

import (
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/internal/testfix"
)

// An evaluation or prediction program (Targets) allocates only the
// persistent variables its ops read: the parameters, not the optimizer's
// state (adam's two moments, as large as each parameter), which a served
// model would otherwise hold once per compiled program.
func TestEvaluationAllocatesNoOptimizerState(t *testing.T) {
	g := testfix.Model(t, "../../examples/iris.yaml") // adam: two moments a parameter
	p, err := Compile(g, CompileOptions{Batch: 8, Targets: []string{"logits"}, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	states := 0
	for _, name := range g.Order {
		switch v := g.Vars[name]; {
		case v.Kind == dsl.KindParam:
			if p.Scope[name] == nil {
				t.Errorf("parameter %s has no tensor", name)
			}
		case v.Kind == dsl.KindState:
			states++
			if p.Scope[name] != nil {
				t.Errorf("optimizer state %s was allocated for an evaluation", name)
			}
		}
	}
	if states == 0 {
		t.Fatal("the model has no optimizer state to leave out")
	}
}
