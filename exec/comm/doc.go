// Package comm moves one node's tensors: NetComm implements the send,
// recv and accumulate of a node's ops over a transport.Endpoint, rides
// out lost connections, and runs the I/O of the restart protocol (package
// rejoin decides): a trainer remembers what it sent each pserver and
// brings a restarted one up to date, a pserver hears every trainer's
// position before it serves.
package comm
