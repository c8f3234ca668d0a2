package exec

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/transport"
)

// miniSplit places whole parameters round-robin on m pservers, following
// the runtime contract of partition.Split, so the runtime is tested here
// independently of the converter.
func miniSplit(t *testing.T, g *dsl.Graph, n, m int, async bool) (*dsl.Graph, []*dsl.Graph, []string) {
	t.Helper()
	params := g.Params()
	home := map[string]int{}
	for i, p := range params {
		home[p] = i % m
	}
	types := g.Types
	tr := &dsl.Graph{File: g.File, Name: g.Name, Data: g.Data, Vars: map[string]*dsl.Var{}, Train: &dsl.Train{Loss: g.Train.Loss, Metrics: g.Train.Metrics, Batch: g.Train.Batch, Steps: g.Train.Steps}}
	ps := make([]*dsl.Graph, m)
	for i := range ps {
		ps[i] = &dsl.Graph{File: fmt.Sprintf("pserver-%d", i), Name: g.Name, Vars: map[string]*dsl.Var{}}
	}
	for _, name := range g.Order {
		v := g.Vars[name]
		switch {
		case v.Kind == dsl.KindParam:
			ps[home[name]].AddVar(v)
		case v.Kind == dsl.KindState:
			ps[home[v.Of]].AddVar(v)
		default:
			tr.AddVar(v)
		}
	}
	count := n
	if async {
		count = 1
	}
	for _, p := range params {
		i, ty := home[p], types[p]
		tr.Ops = append(tr.Ops, &dsl.Op{Type: "recv", Outputs: []string{p}, Attrs: ops.Attrs{"var": p, "from": fmt.Sprintf("pserver:%d", i), "shape": []int(ty.Shape), "dtype": "f32"}})
		tr.Ops = append(tr.Ops, &dsl.Op{Type: "send", Inputs: []string{dsl.GradName(p)}, Outputs: []string{}, Section: dsl.Backward, Attrs: ops.Attrs{"var": dsl.GradName(p), "to": fmt.Sprintf("pserver:%d", i), "step_offset": 0}})
		ps[i].Ops = append(ps[i].Ops, &dsl.Op{Type: "accumulate", Outputs: []string{dsl.GradName(p)}, Attrs: ops.Attrs{"var": dsl.GradName(p), "count": count, "shape": []int(ty.Shape), "dtype": "f32"}})
	}
	for _, op := range g.Ops {
		if op.Section == dsl.Optimize {
			ps[home[op.Param]].Ops = append(ps[home[op.Param]].Ops, op)
		} else {
			tr.Ops = append(tr.Ops, op)
		}
	}
	for _, a := range g.Assigns {
		owner := a.Target
		if v := g.Vars[a.Target]; v.Kind == dsl.KindState {
			owner = v.Of
		}
		i := home[owner]
		ps[i].Assigns = append(ps[i].Assigns, a)
		if g.Vars[a.Target].Kind == dsl.KindParam {
			ps[i].Ops = append(ps[i].Ops, &dsl.Op{Type: "send", Inputs: []string{a.Value}, Outputs: []string{}, Section: dsl.Optimize,
				Attrs: ops.Attrs{"var": a.Target, "to": "trainer", "step_offset": 1, "reply_to": dsl.GradName(a.Target), "initial": a.Target}})
		}
	}
	for _, x := range append([]*dsl.Graph{tr}, ps...) {
		if err := x.Check(); err != nil {
			t.Fatalf("mini split: %v", err)
		}
	}
	return tr, ps, params
}

// runInmemJob runs a whole job in this process over the in-memory transport.
func runInmemJob(t *testing.T, g *dsl.Graph, n, m int, async bool, opt RunOptions) []*Summary {
	t.Helper()
	tr, ps, params := miniSplit(t, g, n, m, async)
	return runJobInmem(t, &Job{Trainer: tr, PServers: ps, Trainers: n, Async: async, Params: params}, opt)
}

func runJobInmem(t *testing.T, j *Job, opt RunOptions) []*Summary {
	t.Helper()
	trainers, pservers := j.TrainerIDs(), j.PServerIDs()
	hub := transport.NewHub(func(err error) { t.Errorf("rejected: %v", err) }, append(trainers, pservers...)...)
	for _, id := range append(trainers, pservers...) {
		specs, err := j.Specs(id, opt.Batch)
		if err != nil {
			t.Fatal(err)
		}
		hub.Endpoint(id).Accept(specs...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(trainers)+len(pservers))
	sums := make([]*Summary, len(trainers))
	for i, id := range pservers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := j.RunPServer(ctx, i, hub.Endpoint(id), ServeOptions{InitFrom: opt.InitFrom, Log: zerolog.Nop()}); err != nil {
				errs <- fmt.Errorf("%s: %w", id, err)
				cancel()
			}
		}()
	}
	for i, id := range trainers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opt
			o.InitFrom = ""
			if i != 0 {
				o.Save = ""
			}
			s, err := j.RunTrainer(ctx, i, hub.Endpoint(id), o)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", id, err)
				cancel()
				return
			}
			sums[i] = s
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return sums
}

// N trainers with batch b compute what local training with batch N*b
// computes (the data stream rule and gradient averaging make them equal).
func TestSyncEqualsLocalInmem(t *testing.T) {
	for _, opt := range []string{"sgd", "adam"} {
		for _, nm := range [][2]int{{1, 1}, {2, 2}, {3, 2}} {
			n, m := nm[0], nm[1]
			t.Run(fmt.Sprintf("%s/%dx%d", opt, n, m), func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join("..", "testdata", "optim", "mlp-"+opt+".yaml")
				g, err := dsl.Load(path)
				if err != nil {
					t.Fatal(err)
				}
				init := filepath.Join("..", "testdata", "optim", "init.safetensors")
				local := filepath.Join(dir, "local.safetensors")
				if _, err := Train(context.Background(), g, RunOptions{Role: "local", Steps: 40, Batch: 10 * n, InitFrom: init, Save: local, Log: zerolog.Nop()}); err != nil {
					t.Fatal(err)
				}
				dist := filepath.Join(dir, "dist.safetensors")
				runInmemJob(t, g, n, m, false, RunOptions{Steps: 40, Batch: 10, InitFrom: init, Save: dist, Log: zerolog.Nop()})
				compareParams(t, local, dist, 1e-4)
			})
		}
	}
}

func TestAsyncConvergesInmem(t *testing.T) {
	g, err := dsl.Load(filepath.Join("..", "examples", "digits-mlp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sums := runInmemJob(t, g, 2, 2, true, RunOptions{Steps: 500, Log: zerolog.Nop()})
	if acc := sums[0].Metrics["acc"]; acc < 0.95 {
		t.Fatalf("async 2x2 digits accuracy %.3f, want >= 0.95", acc)
	}
}

func compareParams(t *testing.T, a, b string, tol float64) {
	t.Helper()
	ta, _, err := LoadSafetensors(a)
	if err != nil {
		t.Fatal(err)
	}
	tb, _, err := LoadSafetensors(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(ta) != len(tb) || len(ta) == 0 {
		t.Fatalf("%s holds %d tensors, %s %d", a, len(ta), b, len(tb))
	}
	for name, x := range ta {
		y := tb[name]
		if y == nil || !x.Shape.Equal(y.Shape) {
			t.Fatalf("%s: missing or shape differs", name)
		}
		if d := relDiff(y.F, x.F); d > tol {
			t.Errorf("%s: relative difference %.2g > %.0g", name, d, tol)
		}
	}
}
