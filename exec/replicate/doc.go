// Package replicate holds the decisions of a serving replica that follows
// a running job (psgraph serve --plan, docs/serving.md), as pure state
// machines importing only the standard library, like exec/rejoin: what a
// pserver owes one subscriber, coalescing the steps a slow one has not
// taken (Feed), and a replica's view of the pservers it follows: what to
// do with a delta, when it is caught up, which step it serves (Follow);
// and the subscription's frames (Writer, Reader). The I/O around them is
// exec/pserver's Publisher and exec/serve's follower.
package replicate
