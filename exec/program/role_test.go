package program

import (
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/internal/testfix"
	"github.com/psgraph/psgraph/partition"
)

// A placed graph compiles only for the role it was placed on: a trainer's
// graph of a model with a sharded table (fetch_rows, send_rows) and a
// pserver's (accumulate, serve_rows, accumulate_rows) compile as their own
// role, and fail to compile, saying which role runs the op, as the other
// role or outside a job; the model itself, with no communication op,
// compiles outside a job.
func TestCommOpsBuildOnTheirRole(t *testing.T) {
	g := testfix.Model(t, testfix.Path("testdata/sparse/emb-adagrad.yaml"))
	plan, err := partition.Split(g, partition.Options{Trainers: 2, PServers: 2, MinBlockSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	compile := func(g *dsl.Graph, role ir.Role) error {
		p, err := Compile(g, CompileOptions{Node: kernels.Node{Role: role, Trainers: 2}})
		if err == nil {
			p.Close()
		}
		return err
	}
	has := func(g *dsl.Graph, op string) bool {
		for _, o := range g.Ops {
			if o.Type == op {
				return true
			}
		}
		return false
	}
	tr, ps := plan.Trainer, plan.PServers[0]
	for _, c := range []struct {
		g   *dsl.Graph
		ops []string
	}{{tr, []string{"fetch_rows", "send_rows"}}, {ps, []string{"accumulate", "serve_rows", "accumulate_rows"}}} {
		for _, op := range c.ops {
			if !has(c.g, op) {
				t.Fatalf("the placed graph %s has no %s op: the model no longer exercises it", c.g.Name, op)
			}
		}
	}
	if err := compile(tr, ir.TrainerRole); err != nil {
		t.Errorf("the trainer's graph as a trainer: %v", err)
	}
	if err := compile(ps, ir.PServerRole); err != nil {
		t.Errorf("the pserver's graph as a pserver: %v", err)
	}
	for _, c := range []struct {
		what string
		g    *dsl.Graph
		role ir.Role
		want string
	}{
		{"the trainer's graph as a pserver", tr, ir.PServerRole, "runs on a trainer, and this graph is run as a pserver"},
		{"the pserver's graph as a trainer", ps, ir.TrainerRole, "runs on a pserver, and this graph is run as a trainer"},
		{"the trainer's graph outside a job", tr, ir.NoRole, "moves tensors between nodes"},
		{"the pserver's graph outside a job", ps, ir.NoRole, "moves tensors between nodes"},
	} {
		if err := compile(c.g, c.role); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.what, err, c.want)
		}
	}
	if err := compile(g, ir.NoRole); err != nil {
		t.Errorf("the model outside a job: %v", err)
	}
}
