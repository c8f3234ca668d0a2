// Package dsl is psgraph's model language and its graph IR. Parse reads
// a model's YAML into a Graph (every error at file:line:col); Load
// parses, then expands it: Graph.Differentiate generates the backward
// pass from train.loss and Graph.ExpandOptimizer writes each parameter's
// optimizer as ordinary ops (templates in optimizers/*.yaml); Graph.Check
// and Graph.Infer check names, cycles and shapes, the batch axis kept
// symbolic. Marshal writes a graph back as YAML (the subgraphs split
// places), LowerDynamic turns a dynamic table's reads into the dyn_* ops
// a program runs, and Graph.Transfers is the transfer table of a placed
// graph: what it sends and receives, read by split, the trainer and the
// pserver. It links no runtime (layering_test.go).
package dsl
