// Package halt holds the stop protocol's decisions: how the nodes of a
// split job reading an online source stop together when any of them is
// asked to stop (SIGTERM, SIGINT: `psgraph train` passing on its signal, or
// Kubernetes stopping every pod of the job at its own moment).
//
// A node asked to stop does not leave the job: a pserver keeps serving
// and tells every trainer the job is to stop (Ask); a trainer tells the
// hub, pserver-0, how many steps it has started (Propose: it will finish
// the one it is in). The hub passes the ask on to every trainer, each of
// which proposes too, and in a sync job, whose trainers run in lockstep
// through the pservers, decides the job's last step once it heard every
// trainer: the largest proposal, which every trainer can reach (Decide).
// A trainer that proposed starts no step before the decision; it runs the
// steps up to the decided one, checkpoints and ends, and the pservers,
// once every trainer said it is done, checkpoint the same step and end.
// An async trainer stops on its own at its next step, without waiting
// for a decision. A trainer that ends by itself (its last step, the end
// of its source) proposes its steps as final, so the hub never waits for
// a trainer that is gone.
//
// It is pure: it imports only the standard library, does no I/O and
// keeps no clock; Trainer and Hub are state machines whose scenarios are
// data-driven tests (testdata/*.txt). Package comm does the I/O around
// them. See docs/streaming.md, "Stopping a split job".
package halt
