package cmd

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/exec"
	"github.com/psgraph/psgraph/exec/launch"
	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
)

type trainOptions struct {
	split    splitOptions
	steps    int
	batch    int
	initFrom string
	save     string
	metrics  string
	keep     string
	log      logFlags
	ck       checkpointFlags
}

func newTrainCmd() *cobra.Command {
	o := &trainOptions{}
	c := &cobra.Command{
		Use:   "train MODEL.yaml --trainers N --pservers M",
		Short: "Run a whole distributed job on this machine",
		Long: `Train splits the model, picks free loopback ports, starts every pserver
and trainer as a child process of this binary, prefixes their log lines
with the role, and prints trainer 0's JSON summary last. If a child fails
the others are stopped and train exits non-zero with that child's error;
Ctrl-C stops them all. The children share a freshly generated token.`,
		Example: `  psgraph train examples/digits-mlp.yaml --trainers 2 --pservers 2
  psgraph train examples/digits-mlp.yaml --trainers 2 --pservers 2 --mode async --save digits.safetensors`,
		Args: exactArgs(1, "one model file"),
		RunE: func(c *cobra.Command, args []string) error { return o.run(c, args[0]) },
	}
	f := c.Flags()
	o.split.addPlacement(c)
	f.IntVar(&o.steps, "steps", 0, "training steps (default: the model's train.steps)")
	f.IntVar(&o.batch, "batch", 0, "per-trainer batch size (default: the model's train.batch)")
	f.StringVar(&o.initFrom, "init-from", "", "load initial parameters by name from a safetensors file (read by the pservers)")
	f.StringVar(&o.save, "save", "", "write the final parameters to a safetensors file (trainer 0)")
	f.StringVar(&o.metrics, "metrics", "", "JSON-lines progress file of trainer 0; trainer i writes NAME.trainer-i.jsonl beside it")
	f.StringVar(&o.keep, "plan-dir", "", "write the plan into this directory and keep it (default: a temporary one)")
	o.log.add(c)
	o.ck.add(c, false)
	return c
}

func (o *trainOptions) run(c *cobra.Command, model string) error {
	dir := o.keep
	if dir == "" {
		tmp, err := os.MkdirTemp("", "psgraph-train-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	o.split.out = dir
	opt, err := o.split.options(model)
	if err != nil {
		return err
	}
	if o.steps < 0 || o.batch < 0 {
		return usagef("--steps and --batch must be positive")
	}
	if o.log.format != "console" && o.log.format != "json" {
		return usagef("--log-format must be console or json, got %q", o.log.format)
	}
	g, sum, err := loadForSplit(model)
	if err != nil {
		return err
	}
	if g.Train == nil || g.Train.Optimizer == nil {
		return fmt.Errorf("%s: the model has no train.optimizer, so there is nothing to train", model)
	}
	addrs, err := freePorts(opt.PServers)
	if err != nil {
		return err
	}
	opt.Endpoints = addrs
	opt.SourceSHA256 = sum
	plan, err := partition.Split(g, opt)
	if err != nil {
		return err
	}
	if err := plan.Write(dir); err != nil {
		return err
	}
	token, err := randomToken()
	if err != nil {
		return err
	}
	env := []string{"PSGRAPH_TOKEN=" + token}
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		// N+M processes share this machine's cores: more Go threads than
		// cores only add context switches to every message's latency
		// (2x2 digits on 2 cores: 1,550 steps/s with 2 each, 2,000 with 1).
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", max(1, runtime.NumCPU()/(opt.Trainers+opt.PServers))))
	}
	if _, err := o.ck.checkpointer("", g.Name); err != nil {
		return err
	}
	resume := int64(0)
	if o.ck.dir != "" {
		var ids []transport.NodeID
		for i := 0; i < opt.PServers; i++ {
			ids = append(ids, transport.PServer(i))
		}
		if resume, err = exec.CommonCheckpoint(o.ck.dir, ids); err != nil {
			return err
		}
		if resume > 0 {
			fmt.Fprintf(c.ErrOrStderr(), "resuming from the checkpoints of step %d in %s\n", resume, o.ck.dir)
		}
	}
	common := []string{"--plan", dir, "--log-format", o.log.format}
	if o.log.every > 0 {
		common = append(common, "--log-every", strconv.Itoa(o.log.every))
	}
	var children []launch.Child
	var shards []string // the pservers' shards of the lookup tables, merged into --save
	for i := 0; i < opt.PServers; i++ {
		args := append([]string{"run", "--role", "pserver", "--index", strconv.Itoa(i), "--listen", addrs[i]}, common...)
		if o.initFrom != "" {
			args = append(args, "--init-from", o.initFrom)
		}
		if o.save != "" && plan.Info.HasTables() {
			shards = append(shards, filepath.Join(dir, fmt.Sprintf("shards-pserver-%d.safetensors", i)))
			args = append(args, "--save", shards[i])
		}
		if o.ck.dir != "" {
			args = append(args, "--checkpoint-dir", o.ck.dir, "--checkpoint-every", strconv.Itoa(o.ck.every))
			if resume > 0 {
				args = append(args, "--resume-step", strconv.FormatInt(resume, 10))
			}
		}
		children = append(children, launch.Child{Name: fmt.Sprintf("pserver-%d", i), Args: args, Env: env})
	}
	for i := 0; i < opt.Trainers; i++ {
		args := append([]string{"run", "--role", "trainer", "--index", strconv.Itoa(i), "--pservers", strings.Join(addrs, ",")}, common...)
		if o.steps > 0 {
			args = append(args, "--steps", strconv.Itoa(o.steps))
		}
		if resume > 0 {
			args = append(args, "--start-step", strconv.FormatInt(resume, 10))
		}
		if o.batch > 0 {
			args = append(args, "--batch", strconv.Itoa(o.batch))
		}
		if o.save != "" && i == 0 {
			args = append(args, "--save", o.save)
		}
		if o.metrics != "" {
			args = append(args, "--metrics", metricsFile(o.metrics, i))
		}
		children = append(children, launch.Child{Name: fmt.Sprintf("trainer-%d", i), Args: args, Env: env})
	}
	fmt.Fprint(c.ErrOrStderr(), plan.Summary())
	res, err := launch.Run(c.Context(), children, launch.Options{Log: c.ErrOrStderr()})
	if err != nil {
		return err
	}
	if len(shards) > 0 {
		if err := exec.MergeShards(o.save, o.save, plan.PServers, shards); err != nil {
			return err
		}
		for _, f := range shards {
			os.Remove(f)
		}
	}
	var rss []string
	for _, ch := range children {
		rss = append(rss, fmt.Sprintf("%s %.1f MiB", ch.Name, float64(res.PeakRSS[ch.Name])/(1<<20)))
	}
	fmt.Fprintf(c.ErrOrStderr(), "peak RSS: %s\n", strings.Join(rss, ", "))
	out := bytes.TrimSpace(res.Stdout["trainer-0"])
	if i := bytes.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	fmt.Fprintln(c.OutOrStdout(), string(out))
	return nil
}

// metricsFile is trainer i's progress file: the given name for trainer 0,
// NAME.trainer-i.EXT for the others.
func metricsFile(path string, i int) string {
	if i == 0 {
		return path
	}
	ext := filepath.Ext(path)
	return fmt.Sprintf("%s.trainer-%d%s", strings.TrimSuffix(path, ext), i, ext)
}

// freePorts reserves n loopback ports by listening on port 0.
func freePorts(n int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []string
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("cannot find a free loopback port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
