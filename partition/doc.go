// Package partition is psgraph's graph converter. Split is a pure function
// from an expanded, checked model to a Plan: one trainer subgraph shared by
// every trainer replica, one subgraph per pserver holding parameters (or
// row blocks of them), their initializers, optimizer state and optimizer
// ops, and the send/recv/accumulate ops that join them. It reads no files
// and opens no sockets; Plan.Write and ReadPlan do the I/O for the command
// line and the runtime. docs/split.md describes the rules and file formats.
//
// The files follow Split's steps: groups.go finds each parameter's
// optimizer subgraph and checks its edges, blocks.go cuts parameters into
// row blocks and places them on pservers, build.go writes the subgraphs,
// order.go orders their ops canonically, plan.go describes the plan
// (plan.yaml's info and the summary split prints), planfile.go renders,
// writes and reads the plan's files.
package partition
