// Package pserver runs a parameter server: its subgraph cut into parts
// (one parameter block and its optimizer each), one loop per part that
// accumulates the trainers' gradients, updates and sends the next step's
// parameters, checkpoints, publishes what each step changed to the
// serving replicas that subscribe (Publisher), and at the end the
// lookup-table shards it holds.
package pserver
