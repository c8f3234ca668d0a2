package cmd

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/trainer"

	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/dsl"

	"github.com/psgraph/psgraph/exec/node"
)

type runOptions struct {
	role     string
	steps    int
	batch    int
	initFrom string
	save     string
	metrics  string
	log      logFlags
	net      netFlags
	ck       checkpointFlags
	cpuProf  string
	prom     string // --metrics-addr
	final    bool   // --final-pass
}

// checkpointFlags are shared by local runs, pservers and train.
type checkpointFlags struct {
	dir        string
	every      int
	resumeStep int64
	startStep  int
}

func (k *checkpointFlags) add(c *cobra.Command, node bool) {
	f := c.Flags()
	f.StringVar(&k.dir, "checkpoint-dir", "", "local, pserver: save parameters and optimizer state here and resume from the newest checkpoint in it; trainer: the same for what it holds (the model's own state, such as batch_norm's running statistics; a parameter placed on it), when it holds some")
	f.IntVar(&k.every, "checkpoint-every", 0, "save a checkpoint every K steps (0: never; keeps the last two)")
	if node {
		f.Int64Var(&k.resumeStep, "resume-step", -1, "pserver: resume from this step's checkpoint instead of the newest")
		f.IntVar(&k.startStep, "start-step", -1, "trainer: the step the job resumes at (default: learn it from the pservers' first parameter message)")
	}
}

func (k *checkpointFlags) checkpointer(name, model string) (*modelfile.Checkpointer, error) {
	return node.Checkpointer(k.dir, k.every, name, model)
}

// netFlags are the flags of a node of a distributed job. Each may also come
// from a PSGRAPH_* environment variable, so an orchestrator can start roles
// without composing flags; flags win.
type netFlags struct {
	index            int
	plan             string
	listen           string
	pservers         string
	connectTimeout   time.Duration
	tokenFile        string
	insecure         bool
	trainerTimeout   time.Duration
	handshakeTimeout time.Duration
	tlsCert          string
	tlsKey           string
	tlsCA            string
}

func (n *netFlags) add(c *cobra.Command) {
	f := c.Flags()
	f.IntVar(&n.index, "index", -1, "this node's index among its role (env PSGRAPH_INDEX)")
	f.StringVar(&n.plan, "plan", "", "the directory 'psgraph split' wrote (env PSGRAPH_PLAN)")
	f.StringVar(&n.listen, "listen", "", "pserver: host:port (or unix:PATH, a Unix-domain socket) to listen on (env PSGRAPH_LISTEN; default: the plan's endpoint)")
	f.StringVar(&n.pservers, "pserver-endpoints", "", "trainer: host:port (or unix:PATH) of every pserver, comma-separated (env PSGRAPH_PSERVERS; default: the plan's endpoints)")
	// --pservers is the pserver count in split and train; run took it as
	// the address list before, and still does, with a warning.
	f.StringVar(&n.pservers, "pservers", "", "")
	_ = f.MarkHidden("pservers")
	f.DurationVar(&n.connectTimeout, "connect-timeout", 60*time.Second, "trainer: keep retrying to reach the pservers this long, at the start and whenever a pserver's connection is lost (a restarted pserver must be back within it)")
	f.StringVar(&n.tokenFile, "token-file", "", "file holding the job's shared secret (or env PSGRAPH_TOKEN)")
	f.BoolVar(&n.insecure, "insecure", false, "pserver: allow listening on a non-loopback address without a token")
	f.StringVar(&n.tlsCert, "tls-cert", "", "PEM certificate of this node (pserver: required for TLS; trainer: a client certificate)")
	f.StringVar(&n.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&n.tlsCA, "tls-ca", "", "PEM CA bundle: a trainer verifies its pservers with it; a pserver given one requires client certificates signed by it")
	f.DurationVar(&n.trainerTimeout, "trainer-timeout", 30*time.Second, "pserver: how long to wait for a lost trainer before the job stops")
	f.DurationVar(&n.handshakeTimeout, "handshake-timeout", 10*time.Second, "how long a new connection has to complete the handshake (authentication) before it is cut off")
}

// fromEnv fills flags the user did not set from the environment.
func (n *netFlags) fromEnv(c *cobra.Command, role *string) error {
	f := c.Flags()
	if f.Changed("pservers") && f.Changed("pserver-endpoints") {
		return usagef("--pservers and --pserver-endpoints both give the pservers' addresses; give only --pserver-endpoints")
	}
	if f.Changed("pservers") {
		fmt.Fprintln(c.ErrOrStderr(), "psgraph: warning: --pservers is the pserver count in split and train; give run the pservers' addresses as --pserver-endpoints")
	}
	env := func(flag, key string, set func(string) error) error {
		if f.Changed(flag) {
			return nil
		}
		if v, ok := os.LookupEnv(key); ok && v != "" {
			if err := set(v); err != nil {
				return usagef("%s=%q: %v", key, v, err)
			}
		}
		return nil
	}
	return firstErr(
		env("role", "PSGRAPH_ROLE", func(v string) error { *role = v; return nil }),
		env("index", "PSGRAPH_INDEX", func(v string) (err error) { n.index, err = strconv.Atoi(v); return }),
		env("plan", "PSGRAPH_PLAN", func(v string) error { n.plan = v; return nil }),
		env("listen", "PSGRAPH_LISTEN", func(v string) error { n.listen = v; return nil }),
		env("pserver-endpoints", "PSGRAPH_PSERVERS", func(v string) error {
			if !f.Changed("pservers") {
				n.pservers = v
			}
			return nil
		}),
	)
}

// checkStepsBatch refuses a negative --steps or --batch, and --steps 0:
// the default 0 means the model's train.steps, so a 0 the user typed would
// silently train those steps (TestStepsZeroIsRefused).
func checkStepsBatch(c *cobra.Command, steps, batch int) error {
	if steps < 0 || batch < 0 {
		return usagef("--steps and --batch must be positive")
	}
	if steps == 0 && c.Flags().Changed("steps") {
		return usagef("--steps 0 trains nothing; to evaluate a saved model use psgraph eval (leave --steps out to train the model's train.steps)")
	}
	if batch == 0 && c.Flags().Changed("batch") {
		return usagef("--batch 0 is not a batch size; give a positive --batch, or leave it out to use the model's train.batch")
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func newRunCmd() *cobra.Command {
	o := &runOptions{}
	c := &cobra.Command{
		Use:   "run --role local|trainer|pserver [MODEL.yaml]",
		Short: "Run a model or a placed subgraph",
		Long: `Run executes a graph with psgraph's runtime.

With --role local the whole model trains on this node. With --role pserver
or --role trainer it runs one node of a job that 'psgraph split' placed:
pservers hold the parameters and run the optimizer, trainers run the
forward and backward pass. Progress goes to stderr; the last line of stdout
is a JSON summary (for trainers and local runs: loss and metrics over the
whole data set with the final parameters; for every node the bytes it sent
and received, docs/runtime.md).`,
		Example: `  psgraph run --role local examples/digits-mlp.yaml
  psgraph run --role local examples/digits-mlp.yaml --steps 200 --save digits.safetensors --metrics run.jsonl
  psgraph split examples/digits-mlp.yaml --trainers 2 --pservers 1 -o job/
  psgraph run --role pserver --index 0 --plan job/ --listen 127.0.0.1:7000
  psgraph run --role trainer --index 0 --plan job/ --pserver-endpoints 127.0.0.1:7000
  psgraph run --role trainer --index 1 --plan job/ --pserver-endpoints 127.0.0.1:7000`,
		RunE: func(c *cobra.Command, args []string) error { return o.run(c, args) },
	}
	f := c.Flags()
	f.StringVar(&o.role, "role", "", "required: local (the whole model on this node), trainer or pserver (env PSGRAPH_ROLE)")
	f.IntVar(&o.steps, "steps", 0, "training steps, at least 1 (default: the model's train.steps or train.epochs)")
	f.IntVar(&o.batch, "batch", 0, "per-trainer batch size (default: the model's train.batch)")
	f.StringVar(&o.initFrom, "init-from", "", "local, pserver: load initial parameters by name from a safetensors file (a local run also takes a saved model's normalization statistics); trainer: only what it holds (the model's own state, a parameter placed on it) and the normalization statistics")
	f.StringVar(&o.save, "save", "", "local, trainer: write the final parameters to a safetensors file; pserver: write its shards of the fixed lookup tables (trainer 0's --save holds the whole model, tables included)")
	f.StringVar(&o.metrics, "metrics", "", "local, trainer: write one JSON object per logged step to this file")
	addFinalPassFlag(c, &o.final)
	o.log.add(c)
	o.net.add(c)
	o.ck.add(c, true)
	f.StringVar(&o.cpuProf, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	addMetricsFlag(c, &o.prom)
	return c
}

func (o *runOptions) run(c *cobra.Command, args []string) error {
	if err := o.net.fromEnv(c, &o.role); err != nil {
		return err
	}
	if err := checkStepsBatch(c, o.steps, o.batch); err != nil {
		return err
	}
	stop, err := cpuProfile(o.cpuProf)
	if err != nil {
		return err
	}
	defer stop()
	switch o.role {
	case "local":
		if len(args) != 1 {
			return usagef("run --role local expects one model file, got %d arguments", len(args))
		}
		return o.runLocal(c, args[0])
	case "trainer", "pserver":
		if len(args) != 0 {
			return usagef("run --role %s takes no model file: it runs its subgraph from --plan DIR", o.role)
		}
		return o.runNode(c)
	case "":
		return usagef("run needs --role; use --role local to train the whole model on this node")
	default:
		return usagef("--role %q is not supported; use local, trainer or pserver", o.role)
	}
}

func (o *runOptions) runLocal(c *cobra.Command, file string) error {
	log, err := o.log.logger(c.ErrOrStderr(), o.role)
	if err != nil {
		return err
	}
	g, err := dsl.Load(file)
	if err != nil {
		return err
	}
	if err := g.Trainable(); err != nil {
		return err
	}
	if o.batch > 0 && o.batch != g.Train.Batch {
		// Re-check shapes and sizes at the batch this run uses.
		g.Train.Batch = o.batch
		if err := g.Check(); err != nil {
			return fmt.Errorf("with --batch %d: %w", o.batch, err)
		}
	}
	ck, err := o.ck.checkpointer("local", g.Name)
	if err != nil {
		return err
	}
	prom, err := startMetrics(o.prom, "local", log)
	if err != nil {
		return err
	}
	defer prom.Close()
	// An online source's run stops after its step at the first signal
	// (Stop), at once at the second (the hard context).
	sum, err := trainer.Train(hardContext(c.Context()), g, trainer.RunOptions{
		Role: o.role, Steps: o.steps, Batch: o.batch, InitFrom: o.initFrom, Save: o.save,
		Metrics: o.metrics, LogEvery: o.log.every, Log: log, Checkpoint: ck, Prom: prom.Node(),
		FinalPass: finalPass(c), Stop: c.Context().Done(),
	})
	if err != nil {
		return err
	}
	return printJSON(c, sum)
}

// addFinalPassFlag adds --final-pass, for local runs and trainers.
func addFinalPassFlag(c *cobra.Command, v *bool) {
	c.Flags().BoolVar(v, "final-pass", false, "local, trainer: after the last step, evaluate loss and metrics over the whole training data for the summary (default: true for data in memory, false for a streamed file, whose summary is then the mean of the last 100 steps)")
}

// finalPass is --final-pass as the trainer takes it: auto when not given.
func finalPass(c *cobra.Command) trainer.FinalPass {
	f := c.Flags().Lookup("final-pass")
	switch {
	case f == nil || !f.Changed:
		return trainer.FinalPassAuto
	case f.Value.String() == "true":
		return trainer.FinalPassOn
	}
	return trainer.FinalPassOff
}

// finalPassArg is --final-pass as train passes it on to its trainers.
func finalPassArg(c *cobra.Command) string {
	if f := c.Flags().Lookup("final-pass"); f != nil && f.Changed {
		return f.Value.String()
	}
	return ""
}

func printJSON(c *cobra.Command, v any) error {
	js, err := json.Marshal(v)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.OutOrStdout(), string(js))
	return nil
}

func (o *runOptions) runNode(c *cobra.Command) error {
	n := &o.net
	token, err := n.token()
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s-%d", o.role, n.index)
	log, err := o.log.logger(c.ErrOrStderr(), name)
	if err != nil {
		return err
	}
	prom, err := startMetrics(o.prom, name, log)
	if err != nil {
		return err
	}
	defer prom.Close()
	var pservers []string
	if n.pservers != "" {
		pservers = strings.Split(n.pservers, ",")
	}
	// A job reading an online source stops at a step its trainers agree
	// on when asked (Stop), at once at a second signal (node.Run).
	sum, err := node.Run(hardContext(c.Context()), node.Options{
		Role: o.role, Index: n.index, Plan: n.plan,
		Listen: n.listen, PServers: pservers, Token: token, Insecure: n.insecure,
		TLSCert: n.tlsCert, TLSKey: n.tlsKey, TLSCA: n.tlsCA,
		ConnectTimeout: n.connectTimeout, TrainerTimeout: n.trainerTimeout, HandshakeTimeout: n.handshakeTimeout,
		Steps: o.steps, Batch: o.batch, InitFrom: o.initFrom, Save: o.save, Metrics: o.metrics,
		LogEvery: o.log.every, Log: log, Prom: prom.Node(), FinalPass: finalPass(c),
		CheckpointDir: o.ck.dir, CheckpointEvery: o.ck.every, ResumeStep: o.ck.resumeStep, StartStep: o.ck.startStep,
		Stop: c.Context().Done(),
	})
	if err != nil {
		return err
	}
	return printJSON(c, sum)
}

// token reads the job's shared secret from --token-file or PSGRAPH_TOKEN.
func (n *netFlags) token() (string, error) {
	if n.tokenFile != "" {
		b, err := os.ReadFile(n.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		t := strings.TrimSpace(string(b))
		if t == "" {
			return "", fmt.Errorf("--token-file %s is empty", n.tokenFile)
		}
		return t, nil
	}
	return os.Getenv("PSGRAPH_TOKEN"), nil
}

// cpuProfile starts a CPU profile written to path ("": none) until stop.
func cpuProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
