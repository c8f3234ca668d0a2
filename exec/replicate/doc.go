// Package replicate holds the decisions of a serving replica that follows
// a running job (psgraph serve, docs/serving.md), as pure state machines
// importing only the standard library, like exec/rejoin: what a pserver
// owes one subscriber, coalescing the steps a slow one has not taken
// (Feed), and a replica's view of the pservers it follows: what to do
// with a delta, when it is caught up, which step it serves (Follow).
// The I/O around them (the subscription on the job's authenticated
// transport, reading the values a delta names) is not built yet; the
// replica's other half, applying an update under load, is
// serve.Model.Apply.
package replicate
