package cmd

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec"
)

type runOptions struct {
	role     string
	steps    int
	batch    int
	initFrom string
	save     string
	metrics  string
	log      logFlags
}

func newRunCmd() *cobra.Command {
	o := &runOptions{}
	c := &cobra.Command{
		Use:   "run --role local MODEL.yaml",
		Short: "Run a model or a placed subgraph",
		Long: `Run executes a graph with psgraph's runtime. With --role local the whole
model trains on this node: progress goes to stderr and the last line of
stdout is a JSON summary (loss and metrics over the whole data set).`,
		Example: `  psgraph run --role local examples/digits-mlp.yaml
  psgraph run --role local examples/digits-mlp.yaml --steps 200 --save digits.safetensors --metrics run.jsonl`,
		Args: exactArgs(1, "one model file"),
		RunE: func(c *cobra.Command, args []string) error { return o.run(c, args[0]) },
	}
	f := c.Flags()
	f.StringVar(&o.role, "role", "", "required: local (the whole model on this node)")
	f.IntVar(&o.steps, "steps", 0, "training steps (default: the model's train.steps)")
	f.IntVar(&o.batch, "batch", 0, "per-trainer batch size (default: the model's train.batch)")
	f.StringVar(&o.initFrom, "init-from", "", "load initial parameters by name from a safetensors file")
	f.StringVar(&o.save, "save", "", "write the final parameters to a safetensors file")
	f.StringVar(&o.metrics, "metrics", "", "write one JSON object per logged step to this file")
	o.log.add(c)
	return c
}

func (o *runOptions) run(c *cobra.Command, file string) error {
	switch o.role {
	case "local":
	case "":
		return usagef("run needs --role; use --role local to train the whole model on this node")
	default:
		return usagef("--role %q is not supported; use local", o.role)
	}
	if o.steps < 0 || o.batch < 0 {
		return usagef("--steps and --batch must be positive")
	}
	log, err := o.log.logger(c.ErrOrStderr(), o.role)
	if err != nil {
		return err
	}
	g, err := dsl.Load(file)
	if err != nil {
		return err
	}
	if g.Train == nil || g.Train.Optimizer == nil && !g.Expanded() {
		return fmt.Errorf("%s: the model has no train.optimizer, so there is nothing to train", file)
	}
	if o.batch > 0 && o.batch != g.Train.Batch {
		// Re-check shapes and sizes at the batch this run uses.
		g.Train.Batch = o.batch
		if err := g.Check(); err != nil {
			return fmt.Errorf("with --batch %d: %w", o.batch, err)
		}
	}
	sum, err := exec.Train(c.Context(), g, exec.RunOptions{
		Role: o.role, Steps: o.steps, Batch: o.batch, InitFrom: o.initFrom, Save: o.save,
		Metrics: o.metrics, LogEvery: o.log.every, Log: log,
	})
	if err != nil {
		return err
	}
	js, _ := json.Marshal(sum)
	fmt.Fprintln(c.OutOrStdout(), string(js))
	return nil
}
