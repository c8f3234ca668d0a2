// Package comm moves one node's tensors. Trainer and PServer are the
// communication of the two roles over one transport.Endpoint: each is the
// rendezvous its kernels send and receive through (a trainer's
// kernels.Rendezvous; a pserver's kernels.ServerRendezvous per part loop,
// comm.Part), rides out lost connections, and does the I/O of
// the restart protocol whose decisions are package rejoin's state
// machines: a trainer remembers what it sent each pserver and brings a
// restarted one up to date (rejoin.Link), a pserver hears every trainer's
// position before it serves (rejoin.Gather) and sends a restarted trainer
// its parameters (rejoin.Part).
package comm
