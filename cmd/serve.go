package cmd

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/serve"
)

type serveOptions struct {
	initFrom      string
	listen        string
	maxBody       int64
	maxConcurrent int
	maxBatch      int
	readTimeout   time.Duration
	drainTimeout  time.Duration
	log           logFlags
}

func newServeCmd() *cobra.Command {
	o := &serveOptions{}
	c := &cobra.Command{
		Use:   "serve MODEL.yaml --init-from F.safetensors --listen HOST:PORT",
		Short: "Answer inference requests for a saved model over HTTP (Open Inference Protocol)",
		Long: `Serve answers inference requests for a model with the parameters of a
safetensors file (--save of run or train), speaking the Open Inference
Protocol (KServe v2 REST, as Triton, KServe and Seldon MLServer do):
GET /v2/health/live, /v2/health/ready, /v2/models/NAME (its inputs and
outputs), POST /v2/models/NAME/infer, and the repository extension's
POST /v2/repository/models/NAME/load. NAME is the model file's name:.

A request gives rows as the data file holds them (a BYTES tensor "rows",
one line an element, with or without the label column), which the model's
own data section parses, hashes, fills, transforms and normalizes with the
statistics saved with the parameters; or typed tensors named after the
model's data inputs. The outputs are psgraph predict's (pred, prob, or the
variables a request names), and equal its values for the same rows.

SIGHUP, like the repository load, reads --init-from again and swaps it in
without failing a request; SIGTERM makes the server not ready, lets the
requests in flight finish and exits 0. /metrics has Prometheus metrics.
docs/serving.md says more.`,
		Example: `  psgraph serve examples/ctr.yaml --init-from ctr.safetensors --listen 127.0.0.1:8000
  curl -s localhost:8000/v2/models/ctr/infer -d '{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["0\t1\t2\t..."]}]}'`,
		Args: exactArgs(1, "one model file"),
		RunE: func(c *cobra.Command, args []string) error { return o.run(c, args[0]) },
	}
	f := c.Flags()
	f.StringVar(&o.initFrom, "init-from", "", "required: the model's parameters, a safetensors file (--save of run or train)")
	f.StringVar(&o.listen, "listen", "127.0.0.1:8000", "HOST:PORT to answer HTTP on (port 0: any free port, logged)")
	f.Int64Var(&o.maxBody, "max-body", serve.DefaultMaxBody, "largest request body in bytes; a larger one is refused with 413")
	f.IntVar(&o.maxConcurrent, "max-concurrent", serve.DefaultMaxConcurrent, "inference requests computed at once; one more is refused with 503 and Retry-After, not queued")
	f.IntVar(&o.maxBatch, "max-batch", serve.DefaultMaxBatch, "most rows computed at once; a larger request is computed in chunks of it")
	f.DurationVar(&o.readTimeout, "read-timeout", 30*time.Second, "time to read a request's headers (at most 5s of it) and body; a slower client is cut off")
	f.DurationVar(&o.drainTimeout, "drain-timeout", 30*time.Second, "on SIGTERM, how long to wait for the requests in flight")
	o.log.addFormat(c)
	return c
}

func (o *serveOptions) run(c *cobra.Command, model string) error {
	switch {
	case o.initFrom == "":
		return usagef("serve needs --init-from F.safetensors: the parameters to serve (write them with --save of run or train)")
	case o.maxBody <= 0 || o.maxConcurrent <= 0 || o.maxBatch <= 0:
		return usagef("--max-body, --max-concurrent and --max-batch must be positive")
	}
	log, err := o.log.logger(c.ErrOrStderr(), "serve")
	if err != nil {
		return err
	}
	g, err := dsl.Load(model)
	if err != nil {
		return err
	}
	return serve.Run(c.Context(), g, serve.Options{
		InitFrom: o.initFrom, Listen: o.listen, MaxBody: o.maxBody, MaxConcurrent: o.maxConcurrent, MaxBatch: o.maxBatch,
		ReadTimeout: o.readTimeout, DrainTimeout: o.drainTimeout, Version: Version, Log: log,
	})
}
