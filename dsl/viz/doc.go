// Package viz draws psgraph's artefacts: a model (Model) and a placed plan
// (Plan) as Graphviz DOT text, rendered in-process by RenderSVG and
// RenderPNG (no system Graphviz, no cgo), and a
// training run's --metrics files as a loss and metrics plot (Curves).
//
// The DOT text is deterministic (nodes and edges in graph order), so it is
// tested against golden files; it is plain DOT that Graphviz's dot accepts.
package viz
