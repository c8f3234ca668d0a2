package cmd

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/partition"
)

type splitOptions struct {
	trainers, pservers int
	mode               string
	minBlock           int
	endpoints          string
	out                string
	force              bool
}

func newSplitCmd() *cobra.Command {
	o := &splitOptions{}
	c := &cobra.Command{
		Use:   "split MODEL.yaml --trainers N --pservers M -o DIR",
		Short: "Cut a model into placed trainer and pserver subgraphs",
		Long: `Split places a model for a distributed job: parameters, their optimizer
and its state go to pservers (big parameters cut into row blocks), the
forward and backward pass to one trainer subgraph shared by every trainer.
It writes DIR/plan.yaml, DIR/trainer.yaml and DIR/pserver-<i>.yaml, each a
model that 'psgraph check' accepts. docs/split.md explains the rules.`,
		Example: "  psgraph split examples/digits-mlp.yaml --trainers 2 --pservers 2 -o plan/",
		Args:    exactArgs(1, "one model file"),
		RunE:    func(c *cobra.Command, args []string) error { return o.run(c, args[0]) },
	}
	f := c.Flags()
	o.addPlacement(c)
	f.StringVar(&o.endpoints, "pserver-endpoints", "", "host:port of each pserver, comma-separated, recorded in the plan")
	f.StringVarP(&o.out, "output", "o", "", "output directory (required)")
	f.BoolVar(&o.force, "force", false, "write into a non-empty output directory")
	return c
}

// addPlacement adds the flags that shape a plan; split and train share them.
func (o *splitOptions) addPlacement(c *cobra.Command) {
	f := c.Flags()
	f.IntVar(&o.trainers, "trainers", 1, "number of trainers (replicas of the trainer subgraph)")
	f.IntVar(&o.pservers, "pservers", 1, "number of parameter servers")
	f.StringVar(&o.mode, "mode", "sync", "sync (average every trainer's gradient per step) or async (apply each as it arrives)")
	f.IntVar(&o.minBlock, "min-block-size", partition.DefaultMinBlockSize, "cut parameters with more elements than this into row blocks")
}

func (o *splitOptions) options(model string) (partition.Options, error) {
	opt := partition.Options{Trainers: o.trainers, PServers: o.pservers, Mode: partition.Mode(o.mode), MinBlockSize: o.minBlock, Source: model}
	switch {
	case o.out == "":
		return opt, usagef("split needs -o DIR, the directory to write the plan into")
	case o.trainers < 1:
		return opt, usagef("--trainers must be at least 1, got %d", o.trainers)
	case o.pservers < 1:
		return opt, usagef("--pservers must be at least 1, got %d", o.pservers)
	case o.mode != "sync" && o.mode != "async":
		return opt, usagef("--mode must be sync or async, got %q", o.mode)
	case o.minBlock < 1:
		return opt, usagef("--min-block-size must be at least 1 element, got %d", o.minBlock)
	}
	if o.endpoints != "" {
		opt.Endpoints = strings.Split(o.endpoints, ",")
		for _, e := range opt.Endpoints {
			if i := strings.LastIndex(e, ":"); i <= 0 || i == len(e)-1 {
				return opt, usagef("--pserver-endpoints entry %q is not host:port", e)
			}
		}
		if len(opt.Endpoints) != o.pservers {
			return opt, usagef("--pserver-endpoints lists %d endpoints for --pservers %d; give one host:port per pserver", len(opt.Endpoints), o.pservers)
		}
	}
	return opt, nil
}

func (o *splitOptions) run(c *cobra.Command, model string) error {
	// split is a batch job whose heap is mostly the graph it grows:
	// collecting at 11x the live heap (GOGC=1000) leaves the collections
	// of its first, small heaps (the parser's garbage) and none of the
	// later ones, which mark the whole graph to free little
	// (docs/split.md, Cost).
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(splitGCPercent)
	}
	opt, err := o.options(model)
	if err != nil {
		return err
	}
	if entries, err := os.ReadDir(o.out); err == nil && len(entries) > 0 && !o.force {
		return fmt.Errorf("output directory %s is not empty; choose another -o or pass --force to overwrite", o.out)
	}
	g, sum, err := loadForSplit(model)
	if err != nil {
		return err
	}
	opt.SourceSHA256 = sum
	plan, err := partition.Split(g, opt)
	if err != nil {
		return err
	}
	if err := plan.Write(o.out); err != nil {
		return err
	}
	fmt.Fprint(c.OutOrStdout(), plan.Summary())
	fmt.Fprintf(c.OutOrStdout(), "wrote %s\n", o.out)
	return nil
}

// splitGCPercent is split's GOGC (the GOGC variable overrides it);
// BenchmarkSplitEndToEnd uses the same.
const splitGCPercent = 1000

// loadForSplit loads a model and the hash of its bytes, which the plan
// records (split and train).
func loadForSplit(model string) (*dsl.Graph, string, error) {
	src, err := os.ReadFile(model)
	if err != nil {
		return nil, "", dsl.Errorf(dsl.Pos{File: model}, "cannot read model: %v", err)
	}
	g, err := dsl.LoadBytes(model, src)
	if err != nil {
		return nil, "", err
	}
	return g, partition.HashSource(src), nil
}
