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
	if g.Train != nil && (g.HasOptimizer() || g.Expanded()) {
		return nil
	}
	pos := Pos{File: g.File}
	if g.Train != nil {
		pos = g.Train.Pos
	}
	return Errorf(pos, "the model has no train.optimizer, so there is nothing to train; add one, e.g. train: {loss: loss, batch: 32, optimizer: {type: sgd, lr: 0.1}} (docs/dsl.md)")
}

// hasOpThat reports whether g has an op whose type satisfies is (such as
// ops.ReadsTable: a lookup of a table by id).
func hasOpThat(g *Graph, is func(typ string) bool) bool {
	for _, op := range g.Ops {
		if is(op.Type) {
			return true
		}
	}
	return false
}
