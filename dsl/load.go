package dsl

import (
	"os"
)

// Load reads, expands and checks a model file: the backward pass is
// generated from train.loss and the optimizer is expanded into update ops,
// unless the file already holds them (placed subgraphs written by split).
func Load(path string) (*Graph, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, Errorf(Pos{File: path}, "cannot read model: %v", errText(err))
	}
	return LoadBytes(path, src)
}

// LoadBytes is Load for a model already in memory.
func LoadBytes(path string, src []byte) (*Graph, error) {
	g, err := Parse(path, src)
	if err != nil {
		return nil, err
	}
	if err := g.Expand(); err != nil {
		return nil, err
	}
	return g, nil
}

// Trainable reports why a model gives run nothing to train: it names no
// optimizer (and holds no generated backward or optimizer ops, as a
// subgraph written by split does). run, train and check refuse such a
// model with this error.
func (g *Graph) Trainable() error {
	if g.Train != nil && (g.Train.Optimizer != nil || g.Expanded()) {
		return nil
	}
	pos := Pos{File: g.File}
	if g.Train != nil {
		pos = g.Train.Pos
	}
	return Errorf(pos, "the model has no train.optimizer, so there is nothing to train; add one, e.g. train: {loss: loss, batch: 32, optimizer: {type: sgd, lr: 0.1}} (docs/dsl.md)")
}

// Expand generates the backward pass and optimizer ops (when the graph is
// not expanded yet) and checks the result.
func (g *Graph) Expand() error {
	if g.Expanded() {
		if g.Train != nil && g.Train.Optimizer != nil {
			return Errorf(g.Train.Optimizer.Pos, "this model already holds backward/optimize ops, so it must not name an optimizer")
		}
		if g.Train != nil && g.Train.Clip != nil {
			return Errorf(g.Train.Clip.Pos, "this model already holds backward/optimize ops, so it must not name train.clip (clip them in the model it was generated from)")
		}
		return g.Check()
	}
	batch := max(g.Batch(), 1)
	types, err := g.Infer(batch)
	if err != nil {
		return err
	}
	if errs := g.checkTrain(types); len(errs) > 0 {
		return errs
	}
	if t := g.Train; t != nil && t.Optimizer != nil {
		if t.Loss == "" {
			return Errorf(t.Optimizer.Pos, "train needs loss (the scalar to minimize) when it names an optimizer")
		}
		diff := g.Differentiate
		if batch == g.Batch() { // the types Differentiate would infer again
			diff = func() error { return g.differentiate(types) }
		}
		if err := diff(); err != nil {
			return err
		}
		if err := g.ExpandOptimizer(); err != nil {
			return err
		}
		// The graph only grew: infer just the new ops (a row gradient's
		// rewrite changes types, so a model with tables is inferred anew).
		if batch == g.Batch() && !hasOp(g, "lookup_table_grad") {
			all, err := g.inferKnown(batch, types)
			if err != nil {
				return err
			}
			return g.checkTypes(all, batch)
		}
	}
	return g.Check()
}

func hasOp(g *Graph, typ string) bool {
	for _, op := range g.Ops {
		if op.Type == typ {
			return true
		}
	}
	return false
}
