// Package job ties a placed job together: Job names the subgraph of every
// role, lists what each node receives (Specs), and runs one trainer
// (RunTrainer) or pserver (RunPServer) of it over an endpoint. Its tests
// run whole jobs in process over the in-memory transport.
package job
