package cmd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/cmd/internal/viz"
	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/partition"
)

type vizOptions struct {
	out              string
	collapseBackward bool
	commOnly         bool
}

func newVizCmd() *cobra.Command {
	o := &vizOptions{}
	c := &cobra.Command{
		Use:   "viz MODEL.yaml|SPLIT_DIR|RUN.jsonl... -o FILE.svg|.png|.dot",
		Short: "Draw a model, a placed plan or a run's loss curves",
		Long: `Viz draws what psgraph works with. The argument decides what:

  a directory holding plan.yaml  the placed job: one cluster per node, a dashed
                                 edge per send/recv pair
  one or more .jsonl files       loss and every metric against step, from
                                 'psgraph run --metrics', a line per file
  anything else                  the model: forward, backward and optimizer ops

The -o extension picks the format: .dot (Graphviz text), .svg or .png
(rendered in-process, no Graphviz needed).`,
		Example: `  psgraph viz examples/digits-mlp.yaml -o digits.svg
  psgraph split examples/digits-mlp.yaml --trainers 2 --pservers 2 -o plan/
  psgraph viz plan/ -o plan.svg --collapse-backward
  psgraph viz plan/ -o comm.dot --comm-only
  psgraph run --role local examples/digits-mlp.yaml --metrics run.jsonl --log-every 10
  psgraph viz run.jsonl -o loss.png`,
		RunE: func(c *cobra.Command, args []string) error { return o.run(c, args) },
	}
	f := c.Flags()
	f.StringVarP(&o.out, "output", "o", "", "file to write: .dot, .svg or .png (required)")
	f.BoolVar(&o.collapseBackward, "collapse-backward", false, "model, plan: draw each backward section as one box, and each parameter's optimizer ops as one box")
	f.BoolVar(&o.commOnly, "comm-only", false, "plan: draw only parameters, blocks and the send/recv skeleton")
	return c
}

func (o *vizOptions) run(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usagef("viz expects a model file, a split directory or .jsonl metrics files")
	}
	if o.out == "" {
		return usagef("viz needs -o FILE (.dot, .svg or .png)")
	}
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(o.out)), ".")
	switch format {
	case "dot", "svg", "png":
	default:
		return usagef("-o %s: the extension picks the format; use .dot, .svg or .png", o.out)
	}
	opt := viz.Options{CollapseBackward: o.collapseBackward, CommOnly: o.commOnly}
	var out []byte
	var err error
	switch kind := vizKind(args[0]); {
	case kind == "loss":
		out, err = o.curves(args, format)
	case len(args) > 1:
		return usagef("viz draws one model or plan at a time, got %d arguments (only .jsonl files can be combined)", len(args))
	case kind == "plan":
		out, err = o.graph(c.Context(), format, func() ([]byte, error) {
			p, err := partition.ReadPlan(args[0])
			if err != nil {
				return nil, err
			}
			return viz.Plan(p, opt), nil
		})
	default:
		if o.commOnly {
			return usagef("--comm-only draws a plan's communication; give a split directory, not the model %s", args[0])
		}
		out, err = o.graph(c.Context(), format, func() ([]byte, error) {
			g, err := dsl.Load(args[0])
			if err != nil {
				return nil, err
			}
			return viz.Model(g, opt), nil
		})
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.out, out, 0o644); err != nil {
		return fmt.Errorf("cannot write the picture: %w", err)
	}
	fmt.Fprintf(c.OutOrStdout(), "wrote %s\n", o.out)
	return nil
}

// vizKind tells what an argument is: "plan", "loss" or "model".
func vizKind(arg string) string {
	if st, err := os.Stat(arg); err == nil && st.IsDir() {
		return "plan" // ReadPlan names a missing plan.yaml and how to write it
	}
	if strings.EqualFold(filepath.Ext(arg), ".jsonl") {
		return "loss"
	}
	return "model"
}

func (o *vizOptions) graph(ctx context.Context, format string, dot func() ([]byte, error)) ([]byte, error) {
	src, err := dot()
	if err != nil || format == "dot" {
		return src, err
	}
	if format == "png" {
		return viz.RenderPNG(ctx, src)
	}
	return viz.RenderSVG(ctx, src)
}

func (o *vizOptions) curves(files []string, format string) ([]byte, error) {
	if o.collapseBackward || o.commOnly {
		return nil, usagef("--collapse-backward and --comm-only apply to graphs, not to loss curves")
	}
	if format == "dot" {
		return nil, usagef("-o %s: loss curves are drawn as .png or .svg", o.out)
	}
	var runs []*viz.Run
	for _, f := range files {
		if !strings.EqualFold(filepath.Ext(f), ".jsonl") {
			return nil, usagef("viz combines only .jsonl metrics files; %s is not one", f)
		}
		r, err := viz.ReadRun(f)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	var b bytes.Buffer
	if err := viz.Curves(runs, format, &b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
