package node

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/launch"
	"github.com/psgraph/psgraph/exec/trainer"
	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
)

// InProcessOptions configure a whole job run in one process
// (`psgraph train --in-process`): the flags train passes on to its
// children, given once for all nodes.
type InProcessOptions struct {
	Plan         string // the directory 'psgraph split' wrote
	Steps, Batch int    // the trainers'; 0: the model's
	InitFrom     string // read by the pservers (and the trainers that hold state or normalize)
	Save         string // trainer 0's file: the whole model
	// Metrics is trainer 0's progress file; trainer i writes
	// launch.MetricsFile(Metrics, i).
	Metrics   string
	LogEvery  int
	FinalPass trainer.FinalPass
	// Log gives each node its logger, by name ("pserver-0", "trainer-1"),
	// and "job" the logger of what belongs to no node.
	Log func(name string) zerolog.Logger
}

// InProcess runs every node of a split job in this process, each on
// goroutines of its own, connected by the in-memory transport
// (transport.NewHub) instead of sockets: no ports, no token, one process
// to profile or debug. Each node runs as `psgraph run` runs it, with the
// options train would give its child; the first node to fail stops the
// others, and its error (named by the node) is returned. It returns
// trainer 0's summary.
func InProcess(ctx context.Context, o InProcessOptions) (*trainer.Summary, error) {
	plan, err := partition.ReadPlan(o.Plan)
	if err != nil {
		return nil, err
	}
	if plan.Trainer.Data.IsOnline() {
		return nil, usagef("--in-process cannot run this job: this model reads an online source (data.online), whose job stops at a step its trainers agree on when a signal reaches every process; run it without --in-process")
	}
	if o.Batch != 0 && o.Batch != plan.Trainer.Train.Batch {
		// every trainer runs the one graph: set its batch once, before
		// any of them reads it (as each child sets its own copy's)
		plan.Trainer.Train.Batch = o.Batch
		if err := plan.Trainer.Check(); err != nil {
			return nil, fmt.Errorf("with --batch %d: %w", o.Batch, err)
		}
	}
	j := jobOf(plan)
	trainers, pservers := j.TrainerIDs(), j.PServerIDs()
	jobLog := o.Log("job")
	hub := transport.NewHub(func(err error) { jobLog.Error().Err(err).Msg("rejected") }, append(trainers, pservers...)...)
	// Every endpoint accepts its transfers before any node sends (as a
	// TCP endpoint does before it connects).
	for _, id := range append(trainers, pservers...) {
		specs, err := j.Specs(id, plan.Trainer.Batch())
		if err != nil {
			return nil, err
		}
		hub.Endpoint(id).Accept(specs...)
	}
	held := len(plan.Trainer.Persistent()) > 0
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sum  *trainer.Summary
	)
	run := func(id transport.NodeID, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := f()
			// A node that ends closes its endpoint: a node that failed is
			// then failed at its peers, as a process that exits is.
			hub.Endpoint(id).Close()
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
				mu.Unlock()
				cancel()
			}
		}()
	}
	for i, id := range pservers {
		n := Options{Role: "pserver", Index: i, Plan: o.Plan, InitFrom: o.InitFrom, LogEvery: o.LogEvery, Log: o.Log(id.String()), ResumeStep: -1, endpoint: hub.Endpoint(id)}
		run(id, func() error {
			_, err := runPServer(ctx, plan, n)
			return err
		})
	}
	for i, id := range trainers {
		n := Options{Role: "trainer", Index: i, Plan: o.Plan, Steps: o.Steps, LogEvery: o.LogEvery, Log: o.Log(id.String()), FinalPass: o.FinalPass, StartStep: -1, endpoint: hub.Endpoint(id)}
		if held || plan.Trainer.Normalizes() {
			n.InitFrom = o.InitFrom
		}
		if i == 0 {
			n.Save = o.Save
		}
		if o.Metrics != "" {
			n.Metrics = launch.MetricsFile(o.Metrics, i)
		}
		run(id, func() error {
			s, err := runTrainer(ctx, plan, n)
			if i == 0 {
				sum = s
			}
			return err
		})
	}
	wg.Wait()
	// The node that failed first; the others ended after it, most of
	// them with the job's cancellation.
	for _, err := range errs {
		if !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
	if len(errs) > 0 {
		if err := parent.Err(); err != nil {
			return nil, err // stopped from outside (a signal)
		}
		return nil, errs[0]
	}
	if sum == nil {
		return nil, errors.New("trainer-0 returned no summary")
	}
	return sum, nil
}
