package ir

import "testing"

// A node's two spellings read back to the node, and malformed names are
// refused rather than read as some other node.
func TestNodeSpellings(t *testing.T) {
	for _, n := range []Node{Trainer(0), Trainer(12), PServer(3), {TrainerRole, -1}} {
		if a, err := ParseAttr(n.Attr()); err != nil || a != n {
			t.Errorf("ParseAttr(%q) = %v, %v; want %v", n.Attr(), a, err, n)
		}
		if n.Index < 0 {
			continue
		}
		if p, ok := ParseNode(n.String()); !ok || p != n {
			t.Errorf("ParseNode(%q) = %v, %v; want %v", n.String(), p, ok, n)
		}
	}
	// A serving replica has a name on the wire, never a place in a graph.
	if p, ok := ParseNode("replica-4"); !ok || p != (Node{ReplicaRole, 4}) || p.String() != "replica-4" {
		t.Errorf(`ParseNode("replica-4") = %v, %v`, p, ok)
	}
	if Trainer(1).String() != "trainer-1" || PServer(0).Attr() != "pserver:0" {
		t.Errorf("spellings changed: %s %s", Trainer(1), PServer(0).Attr())
	}
	for _, s := range []string{"", "trainer", "trainer-", "trainer-x", "trainer--1", "trainer-01", "worker-1", "pserver-1x"} {
		if n, ok := ParseNode(s); ok {
			t.Errorf("ParseNode(%q) = %v, want a refusal", s, n)
		}
	}
	for _, s := range []string{"pserver", "worker:1", "trainer:-1", "trainer:x", "", "replica:0", "replica"} {
		if n, err := ParseAttr(s); err == nil {
			t.Errorf("ParseAttr(%q) = %v, want an error", s, n)
		}
	}
}
