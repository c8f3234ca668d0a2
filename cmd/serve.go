package cmd

import (
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/serve"
	"github.com/psgraph/psgraph/partition"
)

type serveOptions struct {
	initFrom      string
	plan          string
	pservers      string
	tokenFile     string
	replica       int
	listen        string
	maxBody       int64
	maxConcurrent int
	maxBatch      int
	readTimeout   time.Duration
	drainTimeout  time.Duration
	cpuProf       string
	log           logFlags
}

func newServeCmd() *cobra.Command {
	o := &serveOptions{}
	c := &cobra.Command{
		Use:   "serve MODEL.yaml (--init-from F.safetensors | --plan DIR --pserver-endpoints H:P,...) --listen HOST:PORT",
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

With --plan and --pserver-endpoints instead of --init-from, the server
follows a running job of that plan: it subscribes to every pserver (with
the job's token, PSGRAPH_TOKEN or --token-file, like the roles), takes
the parameters they hold and then every update they apply; it is ready
once caught up, model_version is the training step served, and it keeps
serving the job's last step when the job ends. docs/serving.md says more.`,
		Example: `  psgraph serve examples/ctr.yaml --init-from ctr.safetensors --listen 127.0.0.1:8000
  curl -s localhost:8000/v2/models/ctr/infer -d '{"inputs":[{"name":"rows","datatype":"BYTES","shape":[1],"data":["0\t1\t2\t..."]}]}'`,
		Args: exactArgs(1, "one model file"),
		RunE: func(c *cobra.Command, args []string) error { return o.run(c, args[0]) },
	}
	f := c.Flags()
	f.StringVar(&o.initFrom, "init-from", "", "the model's parameters, a safetensors file (--save of run or train)")
	f.StringVar(&o.plan, "plan", "", "follow a running job: the directory 'psgraph split' wrote for it")
	f.StringVar(&o.pservers, "pserver-endpoints", "", "with --plan: host:port (or unix:PATH) of every pserver, comma-separated (default: the plan's endpoints)")
	f.StringVar(&o.tokenFile, "token-file", "", "with --plan: file holding the job's shared secret (or env PSGRAPH_TOKEN)")
	f.IntVar(&o.replica, "replica-index", 0, "with --plan: this replica's index (replica-N in the pservers' logs)")
	f.StringVar(&o.listen, "listen", "127.0.0.1:8000", "HOST:PORT to answer HTTP on (port 0: any free port, logged)")
	f.Int64Var(&o.maxBody, "max-body", serve.DefaultMaxBody, "largest request body in bytes; a larger one is refused with 413")
	f.IntVar(&o.maxConcurrent, "max-concurrent", serve.DefaultMaxConcurrent, "inference requests computed at once; one more is refused with 503 and Retry-After, not queued")
	f.IntVar(&o.maxBatch, "max-batch", serve.DefaultMaxBatch, "most rows computed at once; a larger request is computed in chunks of it")
	f.DurationVar(&o.readTimeout, "read-timeout", 30*time.Second, "time to read a request's headers (at most 5s of it) and body; a slower client is cut off")
	f.DurationVar(&o.drainTimeout, "drain-timeout", 30*time.Second, "on SIGTERM, how long to wait for the requests in flight")
	f.StringVar(&o.cpuProf, "cpuprofile", "", "write a CPU profile of the server, until it stops, to this file (go tool pprof)")
	o.log.addFormat(c)
	return c
}

func (o *serveOptions) run(c *cobra.Command, model string) error {
	switch {
	case o.initFrom == "" && o.plan == "":
		return usagef("serve needs --init-from F.safetensors (the parameters to serve: --save of run or train) or --plan DIR (a running job to follow)")
	case o.initFrom != "" && o.plan != "":
		return usagef("serve takes --init-from or --plan, not both: a saved model, or a running job to follow")
	case o.plan == "" && (o.pservers != "" || o.tokenFile != "" || o.replica != 0):
		return usagef("--pserver-endpoints, --token-file and --replica-index go with --plan")
	case o.replica < 0:
		return usagef("--replica-index must not be negative")
	case o.maxBody <= 0 || o.maxConcurrent <= 0 || o.maxBatch <= 0:
		return usagef("--max-body, --max-concurrent and --max-batch must be positive")
	}
	log, err := o.log.logger(c.ErrOrStderr(), "serve")
	if err != nil {
		return err
	}
	stop, err := cpuProfile(o.cpuProf)
	if err != nil {
		return err
	}
	defer stop()
	opt := serve.Options{
		InitFrom: o.initFrom, Listen: o.listen, MaxBody: o.maxBody, MaxConcurrent: o.maxConcurrent, MaxBatch: o.maxBatch,
		ReadTimeout: o.readTimeout, DrainTimeout: o.drainTimeout, Version: Version, Log: log,
	}
	if o.plan == "" {
		g, err := dsl.Load(model)
		if err != nil {
			return err
		}
		return serve.Run(c.Context(), g, opt)
	}
	g, sum, err := loadForSplit(model)
	if err != nil {
		return err
	}
	plan, err := partition.ReadPlan(o.plan)
	if err != nil {
		return err
	}
	addrs := plan.Info.Endpoints
	if o.pservers != "" {
		addrs = strings.Split(o.pservers, ",")
	}
	if len(addrs) != plan.Info.PServers {
		return usagef("serve --plan needs --pserver-endpoints with %d host:port entries (one per pserver of the plan), got %d", plan.Info.PServers, len(addrs))
	}
	token, err := (&netFlags{tokenFile: o.tokenFile}).token()
	if err != nil {
		return err
	}
	return serve.RunFollow(c.Context(), g, opt, serve.FollowOptions{Plan: plan, Endpoints: addrs, Token: token, Index: o.replica, SourceSHA256: sum})
}
