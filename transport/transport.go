// Package transport moves tensors between the nodes of a psgraph job.
//
// A message is a tensor payload keyed by (step, transfer name, source node):
// a recv for step k of W from pserver-0 takes exactly that message and
// nothing else, so a delayed or duplicated message can never be applied to
// the wrong step. Endpoint is the whole contract the executor depends on;
// it has two implementations with one set of semantics (the inbox): an
// in-memory one for tests and single-process jobs, and TCP with one
// multiplexed session per peer pair.
package transport

import (
	"context"
	"errors"
	"fmt"

	"github.com/psgraph/psgraph/dsl/ir"
)

// NodeID names a node of a job: psgraph's one node identity (ir.Node),
// written on the wire as its name ("trainer-0", "pserver-1").
type NodeID = ir.Node

// Trainer returns the id of trainer i.
func Trainer(i int) NodeID { return ir.Trainer(i) }

// PServer returns the id of pserver i.
func PServer(i int) NodeID { return ir.PServer(i) }

// Replica returns the id of serving replica i.
func Replica(i int) NodeID { return NodeID{Role: ir.ReplicaRole, Index: i} }

// ReplicaRole is a serving replica's role (Config.Replicas).
const ReplicaRole = ir.ReplicaRole

// DType is a payload's element type: the IR's (ir.DType), whose numbers
// the wire carries.
type DType = ir.DType

const (
	F32 = ir.F32
	I32 = ir.I32
	// I64 is a payload of little-endian int64s: 64-bit feature keys.
	I64 = ir.I64
	// Rows is a row-sparse payload: n little-endian int32 row ids, then
	// the n rows' float32 values.
	Rows = ir.Rows
)

// Spec declares a transfer a node accepts: its name, element type and the
// exact payload size in bytes, or with AtMost the largest (a list of ids
// or rows whose length varies from step to step).
type Spec struct {
	Var    string
	DType  DType
	Bytes  int
	AtMost bool
}

// Key identifies a message.
type Key struct {
	Step int64
	Var  string
	Src  NodeID
}

func (k Key) String() string { return fmt.Sprintf("%s@%d from %s", k.Var, k.Step, k.Src) }

// Endpoint is one node's view of the job's communication.
type Endpoint interface {
	// Self is this node's id.
	Self() NodeID
	// Accept declares the transfers this node receives. A message for an
	// undeclared transfer, or with another dtype or size, is rejected
	// (reported through the OnError hook) and never delivered.
	Accept(specs ...Spec)
	// Send queues payload for node to under (step, v). It does not wait for
	// the network, except to apply backpressure when too many messages to
	// that peer are queued. payload must not change until Flush returns.
	// If a connection breaks, what the peer had not received is written
	// again from payload on the next one, so it should stay unchanged until
	// the peer has it; psgraph's steps guarantee that (a node overwrites a
	// tensor it sent only after a reply that needed it).
	// Payloads above the receiver's read-ahead size are read by the
	// receiver only once it asks for them (flow control holds the rest).
	Send(ctx context.Context, to NodeID, step int64, v string, dt DType, payload []byte) error
	// Flush waits until every message queued by Send has been written.
	Flush(ctx context.Context) error
	// Recv blocks until the message (step, v) from src arrived and copies
	// its payload into dst. Older steps of v from src still pending are
	// discarded as stale. It fails with ErrPeerDone when src finished
	// without sending it.
	Recv(ctx context.Context, src NodeID, step int64, v string, dst []byte) error
	// RecvSink is Recv handing the payload to sink as it arrives, so a
	// large tensor can be reduced or applied chunk by chunk. If the call
	// fails after part of the payload went to sink (the connection was
	// lost), the message stays pending from that byte: only a RecvSink of
	// the same sink can take the rest (after a reconnect, the sender writes
	// the rest, never a byte twice).
	RecvSink(ctx context.Context, src NodeID, step int64, v string, sink Sink) error
	// RecvAny blocks until a message for v arrived from any peer (the
	// earliest arrival first), copies it into dst and returns its key. It
	// fails with ErrAllDone once every peer finished and nothing is pending.
	// When it fails after taking part of a message (its connection was
	// lost), the key it returns names that message: Recv (or RecvSink) of
	// that key into the same dst (or sink) takes up the rest.
	RecvAny(ctx context.Context, v string, dst []byte) (Key, error)
	// RecvAnySink is RecvAny handing the payload to sink (see RecvSink).
	RecvAnySink(ctx context.Context, v string, sink Sink) (Key, error)
	// Pending blocks until a message of one of the transfers vs is pending
	// from any peer and returns the name of the first of vs that has one,
	// leaving the message for a Recv. It fails like RecvAny: ErrAllDone once
	// every peer finished and none of vs has a message pending. A node that
	// must answer one transfer while it waits for another (a pserver serving
	// a table's rows while it waits for a row gradient) waits on both.
	Pending(ctx context.Context, vs []string) (string, error)
	// DropBefore discards pending messages older than step and rejects
	// such messages from now on.
	DropBefore(step int64)
	// Done tells to that this node sends it nothing more. The peer treats
	// this node as finished only once every message sent before Done was
	// delivered, whatever order the network delivered them in.
	Done(ctx context.Context, to NodeID) error
	// Abort tells to that this node stops the job and why: to's calls
	// concerning this node then fail with an *Aborted carrying reason.
	Abort(ctx context.Context, to NodeID, reason string) error
	// WaitDone blocks until peer said Done and everything it sent before
	// was delivered; it fails if the connection to peer is lost first. A
	// node that finished waits for its peers before it closes, so no peer
	// sees a connection drop before the Done that explains it.
	WaitDone(ctx context.Context, peer NodeID) error
	// WaitPeer blocks until peer is connected: at once while it is, or
	// until a lost peer connected again (the same process after a network
	// blip, or a restarted one).
	WaitPeer(ctx context.Context, peer NodeID) error
	// Restarts reports how often peer came back as a new incarnation (a
	// restarted process: everything pending from the old one was dropped
	// and its counters reset), and a channel closed at its next restart.
	Restarts(peer NodeID) (int64, <-chan struct{})
	// Peek blocks until a message of v from src is pending and returns the
	// step of the oldest one, leaving it pending.
	Peek(ctx context.Context, src NodeID, v string) (int64, error)
	// Traffic reports the bytes this endpoint moved to and from its peers
	// so far. Two atomic adds per message chunk; it never allocates.
	Traffic() Traffic
	// Close releases the endpoint; blocked calls fail with ErrClosed.
	Close() error
}

// Traffic counts what an endpoint moved since it was created
// (docs/wire.md, section 9).
//
// Sent and Recv are payload bytes: the bodies of data messages (tensors,
// and psgraph's own position and resume messages), each byte as often as
// it was written to or read from a connection. A message written again
// after a reconnect counts again on the sender; a message the receiver
// rejected, or dropped as stale, counts on both sides (it crossed the
// wire). Frame headers, stream preambles and control frames (done,
// resume, abort) are not payload. On the in-memory twin every Send counts
// its payload once on both sides.
//
// WireSent and WireRecv are every byte of the TCP connections after the
// handshake: payloads, psgraph's frame headers and control frames, and
// yamux's own framing, window updates and keepalives (inside TLS: the
// plaintext, without TLS's record overhead). 0 on the in-memory twin.
type Traffic struct {
	Sent, Recv         int64
	WireSent, WireRecv int64
}

var (
	// ErrClosed: the endpoint was closed.
	ErrClosed = errors.New("transport: endpoint closed")
	// ErrPeerDone: the peer finished without sending the message asked for.
	ErrPeerDone = errors.New("transport: peer finished")
	// ErrAllDone: every peer finished and nothing is pending.
	ErrAllDone = errors.New("transport: every peer finished")
	// ErrPeerRestarted (reported through OnError): a peer came back as a
	// new incarnation; its old messages and counters were dropped.
	ErrPeerRestarted = errors.New("transport: peer restarted (new incarnation); its old state was dropped")
	// ErrRejected: the message a recv waits for arrived but failed the
	// receiver's checks (Accept: dtype, size); it was never delivered, and
	// the sender will not send it again.
	ErrRejected = errors.New("transport: rejected a message the plan does not allow (does the sender run another split of the job?)")
	// ErrUnknownPeer: the node is not part of this job.
	ErrUnknownPeer = errors.New("transport: unknown peer")
)

// PeerError wraps an error with the peer it concerns.
type PeerError struct {
	Peer NodeID
	Err  error
}

func (e *PeerError) Error() string { return fmt.Sprintf("%s: %v", e.Peer, e.Err) }
func (e *PeerError) Unwrap() error { return e.Err }

// Prefix is a Sink that reads a payload into the front of Buf and counts
// its bytes in N: how an AtMost transfer is received (set N to 0 first).
type Prefix struct {
	Buf []byte
	N   int
}

func (p *Prefix) Next(off int) []byte        { return p.Buf[off:] }
func (p *Prefix) Filled(off int, buf []byte) { p.N = max(p.N, off+len(buf)) }
