package ir

import (
	"fmt"
	"strconv"
	"strings"
)

// Role is what a node of a job does.
type Role uint8

const (
	NoRole Role = iota
	TrainerRole
	PServerRole
	// ReplicaRole is a serving replica (psgraph serve) following a job:
	// it subscribes to the pservers' updates and sends the job nothing.
	// It has no place in a placed graph.
	ReplicaRole
)

func (r Role) String() string {
	switch r {
	case TrainerRole:
		return "trainer"
	case PServerRole:
		return "pserver"
	case ReplicaRole:
		return "replica"
	}
	return "node"
}

// Node names a node of a job: a role and an index. It is the one node
// identity of psgraph, with two spellings: String ("pserver-1"), the
// node's name on the wire, in logs and in checkpoint files, and Attr
// ("pserver:1"), its name in a placed graph's to/from attributes, where
// Index -1 ("trainer") means every trainer (in async mode, the trainer the
// current piece came from).
type Node struct {
	Role  Role
	Index int
}

// Trainer and PServer name trainer i and pserver i.
func Trainer(i int) Node { return Node{TrainerRole, i} }
func PServer(i int) Node { return Node{PServerRole, i} }

// Valid reports whether n names a node (or, with Index -1, every trainer).
func (n Node) Valid() bool { return n.Role != NoRole && n.Index >= -1 }

// String is the node's name: "trainer-0", "pserver-1" ("trainer" for every trainer).
func (n Node) String() string {
	if n.Index < 0 {
		return n.Role.String()
	}
	return n.Role.String() + "-" + strconv.Itoa(n.Index)
}

// Attr is the node's spelling in a to/from attribute: "pserver:1",
// "trainer:0", or "trainer" for every trainer.
func (n Node) Attr() string {
	if n.Index < 0 {
		return n.Role.String()
	}
	return n.Role.String() + ":" + strconv.Itoa(n.Index)
}

func parseRole(s string) Role {
	switch s {
	case "trainer":
		return TrainerRole
	case "pserver":
		return PServerRole
	}
	return NoRole
}

// ParseNode reads a node's name, as String writes it ("pserver-1",
// "replica-0").
func ParseNode(s string) (Node, bool) {
	r, i, found := strings.Cut(s, "-")
	role := parseRole(r)
	if r == "replica" {
		role = ReplicaRole
	}
	if !found || role == NoRole {
		return Node{}, false
	}
	idx, err := strconv.Atoi(i)
	if err != nil || idx < 0 || strconv.Itoa(idx) != i {
		return Node{}, false
	}
	return Node{role, idx}, true
}

// ParseAttr reads a to/from attribute: "trainer", "trainer:<i>" or
// "pserver:<i>".
func ParseAttr(s string) (Node, error) {
	r, idx, has := strings.Cut(s, ":")
	role := parseRole(r)
	if role == NoRole {
		return Node{}, fmt.Errorf("peer %q must be trainer, trainer:<i> or pserver:<i>", s)
	}
	if !has {
		if role == PServerRole {
			return Node{}, fmt.Errorf("peer %q must name one pserver, as pserver:<i>", s)
		}
		return Node{role, -1}, nil
	}
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 {
		return Node{}, fmt.Errorf("peer %q: index must be a non-negative integer", s)
	}
	return Node{role, i}, nil
}
