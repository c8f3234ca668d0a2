package job

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/pserver"
	"github.com/psgraph/psgraph/exec/trainer"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/transport"
)

// A Job is what the runtime needs to know about a placed job: the
// subgraph of each role, the trainer and pserver counts, the mode, and the
// model's parameters (which a trainer receives at the end). partition.Plan
// provides it; tests build it by hand.
type Job struct {
	Trainer  *dsl.Graph
	PServers []*dsl.Graph
	Trainers int
	Async    bool
	// Params are the parameters trainers receive from pservers, in model order.
	Params []string

	// tables holds each node's transfer table, computed once per node
	// and batch (Transfers) and passed down to its communication and loop.
	mu     sync.Mutex
	tables map[tableKey][]dsl.Transfer
}

type tableKey struct {
	id    transport.NodeID
	batch int
}

// Transfers is node id's transfer table (dsl.Graph.Transfers): a
// trainer's at batch (0: the model's), a pserver's at its graph's batch
// (batch is ignored), computed the first time it is asked for.
func (j *Job) Transfers(id transport.NodeID, batch int) ([]dsl.Transfer, error) {
	var g *dsl.Graph
	switch {
	case id.Role == ir.PServerRole && id.Index >= 0 && id.Index < len(j.PServers):
		g = j.PServers[id.Index]
		batch = max(g.Batch(), 1)
	case id.Role == ir.TrainerRole && id.Index >= 0 && id.Index < j.Trainers:
		g = j.Trainer
		if batch <= 0 {
			batch = g.Batch()
		}
		id = transport.Trainer(0) // every trainer runs the one graph
	default:
		return nil, fmt.Errorf("%s is not a node of a job of %d trainers and %d pservers", id, j.Trainers, len(j.PServers))
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	k := tableKey{id, batch}
	if ts, ok := j.tables[k]; ok {
		return ts, nil
	}
	ts, err := g.Transfers(batch, nil)
	if err != nil {
		return nil, err
	}
	if j.tables == nil {
		j.tables = map[tableKey][]dsl.Transfer{}
	}
	j.tables[k] = ts
	return ts, nil
}

// TrainerIDs and PServerIDs name the job's nodes.
func (j *Job) TrainerIDs() []transport.NodeID {
	out := make([]transport.NodeID, j.Trainers)
	for i := range out {
		out[i] = transport.Trainer(i)
	}
	return out
}

func (j *Job) PServerIDs() []transport.NodeID {
	out := make([]transport.NodeID, len(j.PServers))
	for i := range out {
		out[i] = transport.PServer(i)
	}
	return out
}

// Specs lists what node id receives, for its endpoint to accept before it
// connects: its graph's transfers and the control transfer of its role
// (a pserver hears trainers' positions, a trainer a pserver's resume step).
func (j *Job) Specs(id transport.NodeID, batch int) ([]transport.Spec, error) {
	i := id.Index
	var ctrl transport.Spec
	switch {
	case !id.Valid() || i < 0:
		return nil, fmt.Errorf("%q is not a node of the job", id)
	case id.Role == ir.PServerRole && i < len(j.PServers):
		ctrl = comm.PositionSpec
	case id.Role == ir.TrainerRole && i < j.Trainers:
		ctrl = comm.ResumeSpec
	default:
		return nil, fmt.Errorf("%s is not a node of a job of %d trainers and %d pservers", id, j.Trainers, len(j.PServers))
	}
	ts, err := j.Transfers(id, batch)
	if err != nil {
		return nil, err
	}
	specs := comm.Specs(ts)
	for _, s := range specs {
		if strings.HasPrefix(s.Var, "psgraph/") {
			return nil, fmt.Errorf("the graph of %s has a transfer named %q, and psgraph reserves names beginning with psgraph/ for its own messages; rename that variable", id, s.Var)
		}
	}
	specs = append(specs, comm.HaltSpecs(id.Role)...)
	return append(append(specs, ctrl), comm.PullSpecs(ts)...), nil
}

// RunPServer serves pserver i's subgraph over ep until every trainer is done.
func (j *Job) RunPServer(ctx context.Context, i int, ep transport.Endpoint, opt pserver.ServeOptions) (*pserver.ServeSummary, error) {
	if opt.Prom != nil {
		specs, _ := j.Specs(transport.PServer(i), 1)
		ep = opt.Prom.Endpoint(ep, j.TrainerIDs(), specs)
		opt.Prom.SetReady(true) // listening: the trainers can reach it
	}
	g := j.PServers[i]
	ts, err := j.Transfers(transport.PServer(i), 0)
	if err != nil {
		return nil, err
	}
	c := comm.NewPServer(comm.Config{EP: ep, Trainers: j.Trainers, Async: j.Async, Transfers: ts, Timeout: opt.TrainerTimeout, Log: opt.Log})
	defer c.Close()
	if opt.Stop != nil && j.Trainer.Data.IsOnline() {
		defer c.StartHalt(opt.Stop)()
	}
	opt.Comm, opt.Transfers = c, ts
	return pserver.Serve(ctx, g, opt)
}

// RunTrainer trains as trainer i over ep. It first tells every pserver
// where it starts (its position), which a pserver waits for before its
// first step.
func (j *Job) RunTrainer(ctx context.Context, i int, ep transport.Endpoint, opt trainer.RunOptions) (*trainer.Summary, error) {
	opt.Role, opt.TrainerIndex, opt.TrainerCount, opt.Params = transport.Trainer(i).String(), i, j.Trainers, j.Params
	if j.Trainer.Train == nil {
		return nil, dsl.Errorf(dsl.Pos{File: j.Trainer.File}, "the trainer's graph has no train section: split a model with train: {loss, batch, steps, optimizer}")
	}
	// The steps and batch of this trainer's run go into its position: the
	// pservers refuse a job whose trainers disagree on them.
	if opt.Batch <= 0 {
		opt.Batch = j.Trainer.Batch()
	}
	if err := j.tablesFit(opt.Batch); err != nil {
		return nil, err
	}
	steps, err := trainer.StepsOf(j.Trainer, opt.Steps, opt.Batch, j.Trainers, func() (int64, error) { return data.Rows(j.Trainer.Data) })
	if err != nil {
		return nil, err
	}
	opt.Steps = steps
	if opt.Prom != nil {
		specs, _ := j.Specs(transport.Trainer(i), opt.Batch)
		ep = opt.Prom.Endpoint(ep, j.PServerIDs(), specs)
	}
	ts, err := j.Transfers(transport.Trainer(i), opt.Batch)
	if err != nil {
		return nil, err
	}
	c := comm.NewTrainer(comm.Config{EP: ep, Trainers: j.Trainers, Async: j.Async, Transfers: ts, Timeout: opt.PServerTimeout, Log: opt.Log}, j.PServerIDs())
	defer c.Close()
	if opt.Stop != nil && j.Trainer.Data.IsOnline() {
		h := c.StartHalt(opt.Stop)
		defer h.Close()
		opt.Halt = h
	}
	if err := c.Join(ctx, j.Trainer, int64(opt.StartStep), opt.Steps, opt.Batch); err != nil {
		return nil, err
	}
	opt.Comm, opt.Transfers = c, ts
	return trainer.Train(ctx, j.Trainer, opt)
}

// tablesFit checks that a trainer with this batch (0: the model's) asks
// no table shard for more rows per step than the plan's pservers accept:
// they were sized at split's batch, and a larger trainer batch would have
// its requests rejected.
func (j *Job) tablesFit(batch int) error {
	if batch <= 0 { // the model's
		batch = j.Trainer.Batch()
	}
	if !dsl.HasTables(j.Trainer) {
		return nil
	}
	ts, err := j.Transfers(transport.Trainer(0), batch)
	if err != nil {
		return err
	}
	for _, t := range ts {
		if t.Kind != dsl.TableIDsTransfer || t.Recv {
			continue
		}
		g := j.PServers[t.Peer.Index]
		ps, err := j.Transfers(t.Peer, 0)
		if err != nil {
			return err
		}
		for _, u := range ps {
			if u.Kind == dsl.TableIDsTransfer && u.Var == t.Var && t.Bytes > u.Bytes {
				rows, most, table := t.Shape[0], u.Shape[0], "table "+t.Table
				if t.Tables != nil { // a bundle's request: every table's count, then their ids
					rows, most, table = rows-len(t.Tables), most-len(t.Tables), fmt.Sprintf("its %d tables", len(t.Tables))
				}
				return fmt.Errorf("with batch %d a trainer fetches up to %d rows of %s per step, but %s accepts at most %d (the plan was split for batch %d): run the trainers with --batch %d or less, or split again with train.batch set to %d", batch, rows, table, t.Peer, most, g.Batch(), g.Batch(), batch)
			}
		}
	}
	return nil
}
