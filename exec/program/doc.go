// Package program compiles a graph for one node and runs its steps:
// Compile allocates every tensor once and builds every kernel once, the
// scheduler runs a step's ops on the node's cores without allocating
// (a split communication kernel, kernels.Split, as two nodes: its
// non-blocking start, then its wait, which a goroutine takes only when no
// other node is ready, so all of a step's requests are in flight before
// any reply is waited for),
// Init gives parameters and state their initial values (the
// initializers, or --init-from), Feeder copies a batch into the data
// variables, and Streamer runs a pserver part's element-wise update piece
// by piece as its gradient arrives. It knows nothing of roles or of the
// network: communication reaches kernels through the runtime a caller
// passes to Run.
package program
