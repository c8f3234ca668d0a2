package cmd

import (
	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/dsl"
)

type evalOptions struct {
	initFrom string
	data     string
	log      logFlags
}

func newEvalCmd() *cobra.Command {
	o := &evalOptions{}
	c := &cobra.Command{
		Use:   "eval MODEL.yaml --init-from F.safetensors [--data FILE]",
		Short: "Compute a saved model's loss and metrics",
		Long: `Eval computes the model's train.loss and train.metrics with the parameters
of a safetensors file (what --save wrote) over a data set: --data FILE (a
file with the model's columns), else the model's held-out data (data.eval),
else its data. Features are normalized with the training statistics saved
in the file. The last line of stdout is JSON: data, rows, loss and the
metrics.`,
		Example: `  psgraph run --role local examples/digits-mlp.yaml --save digits.safetensors
  psgraph eval examples/digits-mlp.yaml --init-from digits.safetensors
  psgraph eval examples/digits-mlp.yaml --init-from digits.safetensors --data new.csv`,
		Args: exactArgs(1, "one model file"),
		RunE: func(c *cobra.Command, args []string) error { return o.run(c, args[0]) },
	}
	f := c.Flags()
	f.StringVar(&o.initFrom, "init-from", "", "required: the model's parameters, a safetensors file (--save of run or train)")
	f.StringVar(&o.data, "data", "", "evaluate this file (the model's columns) instead of data.eval or the model's data")
	o.log.addFormat(c)
	return c
}

func (o *evalOptions) run(c *cobra.Command, model string) error {
	if o.initFrom == "" {
		return usagef("eval needs --init-from F.safetensors: the parameters to evaluate (write them with --save)")
	}
	log, err := o.log.logger(c.ErrOrStderr(), "eval")
	if err != nil {
		return err
	}
	g, err := dsl.Load(model)
	if err != nil {
		return err
	}
	res, err := evaluate.EvalModel(c.Context(), g, evaluate.EvalOptions{InitFrom: o.initFrom, Data: o.data, Log: log})
	if err != nil {
		return err
	}
	return printJSON(c, res)
}
