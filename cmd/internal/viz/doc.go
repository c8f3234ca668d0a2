// Package viz draws psgraph's artefacts: a model (Model) and a placed plan
// (Plan) as Graphviz DOT text, rendered in-process by RenderSVG and
// RenderPNG (no system Graphviz, no cgo), and a
// training run's --metrics files as a loss and metrics plot (Curves).
//
// The DOT text is deterministic (nodes and edges in graph order), so it is
// tested against golden files; it is plain DOT that Graphviz's dot accepts.
//
// viz serves `psgraph viz` and lives with the command line: it draws
// partition's plans, and its renderers (Graphviz as WebAssembly, gonum
// plot, gg) stay out of the library packages (dsl, partition, exec).
package viz
