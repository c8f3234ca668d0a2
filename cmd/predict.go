package cmd

import (
	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/dsl"
)

type predictOptions struct {
	initFrom string
	data     string
	out      string
	outputs  []string
	keep     []string
	log      logFlags
}

func newPredictCmd() *cobra.Command {
	o := &predictOptions{}
	c := &cobra.Command{
		Use:   "predict MODEL.yaml --init-from F.safetensors --data FILE -o OUT.csv",
		Short: "Write a saved model's outputs for each row of a data file",
		Long: `Predict runs the model's forward graph with the parameters of a
safetensors file over a data file, streaming it, and writes one CSV row
per input row after a header line. The file has the model's feature (and
ids) columns; its label column may be absent. Features are normalized with
the training statistics saved in the parameter file.

--outputs names what to write: pred (a classifier's argmax; for a sigmoid
output 1 where the probability is at least 0.5), prob (the softmax or
sigmoid probabilities) or any variable of the model computed without the
label (e.g. logits). The default: pred,prob for a softmax classifier, prob
for a sigmoid one, the prediction for an mse loss. The last line of stdout
is JSON: out, rows, the number of columns and the first few names
(first_columns; the header line has them all).

--keep names columns of the data file to write first on each row, as they
are in the file (an id, to join the predictions back to the rows); a
tfrecord or parquet file's columns the model does not read may be kept.`,
		Example: `  psgraph predict examples/digits-mlp.yaml --init-from digits.safetensors --data examples/data/digits.csv -o pred.csv
  psgraph predict examples/digits-mlp.yaml --init-from digits.safetensors --data examples/data/digits.csv -o out.csv --outputs logits,prob
  psgraph predict examples/formats/avazu.yaml --init-from avazu.safetensors --data examples/formats/avazu_sample.txt -o pred.csv --keep id`,
		Args: exactArgs(1, "one model file"),
		RunE: func(c *cobra.Command, args []string) error { return o.run(c, args[0]) },
	}
	f := c.Flags()
	f.StringVar(&o.initFrom, "init-from", "", "required: the model's parameters, a safetensors file (--save of run or train)")
	f.StringVar(&o.data, "data", "", "required: the rows to predict, a file with the model's columns")
	f.StringVarP(&o.out, "output", "o", "", "required: the CSV file to write")
	f.StringSliceVar(&o.outputs, "outputs", nil, "what to write, comma-separated: pred, prob, or variables of the model (default: pred,prob for softmax, prob for sigmoid, the prediction for mse)")
	f.StringSliceVar(&o.keep, "keep", nil, "columns of the data file to write first on each row as they are, comma-separated (an id to join the predictions back to the rows)")
	o.log.addFormat(c)
	return c
}

func (o *predictOptions) run(c *cobra.Command, model string) error {
	switch {
	case o.initFrom == "":
		return usagef("predict needs --init-from F.safetensors: the parameters to predict with (write them with --save)")
	case o.data == "":
		return usagef("predict needs --data FILE: the rows to predict, with the model's columns")
	case o.out == "":
		return usagef("predict needs -o OUT.csv: the file to write the predictions to")
	}
	log, err := o.log.logger(c.ErrOrStderr(), "predict")
	if err != nil {
		return err
	}
	g, err := dsl.Load(model)
	if err != nil {
		return err
	}
	res, err := evaluate.Predict(c.Context(), g, evaluate.PredictOptions{InitFrom: o.initFrom, Data: o.data, Out: o.out, Outputs: o.outputs, Keep: o.keep, Log: log})
	if err != nil {
		return err
	}
	return printJSON(c, res)
}
