package cmd

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/partition"
)

func newCheckCmd() *cobra.Command {
	var showOps bool
	c := &cobra.Command{
		Use:   "check MODEL.yaml",
		Short: "Parse, validate and shape-check a model",
		Long: `Check loads a model as run would (generating the backward pass and the
optimizer ops) and prints a summary: variables, parameters with sizes and
the ops of each section. With --ops it prints the model as run executes
it instead: a model file holding every op, the generated backward and
optimizer ops included, with absolute data paths.
Errors name file:line:col.`,
		Example: "  psgraph check examples/digits-mlp.yaml\n  psgraph check examples/digits-mlp.yaml --ops",
		Args:    exactArgs(1, "one model file"),
		RunE: func(c *cobra.Command, args []string) error {
			g, err := dsl.Load(args[0])
			if err != nil {
				return err
			}
			var rows, held int64
			var cut []data.Truncation
			switch {
			case g.Data.IsOnline(): // its rows are checked as they arrive
			case g.Data != nil && g.Data.Stream: // check every row without loading the file
				if rows, cut, err = data.Count(g.Data); err != nil {
					return err
				}
				if e := g.Data.Eval; e != nil {
					spec, err := data.Other(g.Data, e.CSV)
					if err != nil {
						return err
					}
					if held, _, err = data.Count(spec); err != nil {
						return err
					}
				}
			case g.Data != nil:
				sp, err := data.LoadSplit(g.Data, nil)
				if err != nil {
					return err
				}
				rows, cut = int64(sp.Train.Rows), sp.Train.Truncated()
				if sp.Eval != nil {
					held = int64(sp.Eval.Rows)
				}
			}
			// A pserver subgraph of split may hold nothing (more pservers
			// than blocks); it is valid as written.
			if err := g.Trainable(); err != nil && !partition.WrittenBySplit(args[0]) {
				return err
			}
			if showOps {
				// absolute data paths: the output may be saved anywhere
				e := *g
				e.File = "/expanded.yaml"
				src, err := dsl.Marshal(&e)
				if err != nil {
					return err
				}
				_, err = c.OutOrStdout().Write(src)
				return err
			}
			printSummary(c.OutOrStdout(), g, rows, held)
			for _, t := range cut {
				fmt.Fprintln(c.OutOrStdout(), data.DescribeTruncation(t))
			}
			return nil
		},
	}
	c.Flags().BoolVar(&showOps, "ops", false, "print the expanded model (every op, the generated ones included) as a model file")
	return c
}

func printSummary(w io.Writer, g *dsl.Graph, rows, held int64) {
	fmt.Fprintf(w, "model %s (%s): ok\n", g.Name, g.File)
	byKind := map[dsl.VarKind][]string{}
	for _, n := range g.Order {
		byKind[g.Vars[n].Kind] = append(byKind[g.Vars[n].Kind], n)
	}
	temps := 0
	for name := range g.Types {
		if g.Vars[name] == nil {
			temps++
		}
	}
	fmt.Fprintf(w, "vars: %d (data %d, params %d, state %d, temporaries %d)\n", len(g.Order)+temps,
		len(byKind[dsl.KindData]), len(byKind[dsl.KindParam]), len(byKind[dsl.KindState]), temps)
	total := 0
	fmt.Fprintf(w, "params (%d):\n", len(byKind[dsl.KindParam]))
	for _, n := range byKind[dsl.KindParam] {
		t := g.Types[n]
		if dy := g.Vars[n].Dynamic; dy != nil {
			fmt.Fprintf(w, "  %-16s %-12v dynamic: %s\n", n, t.Shape, describeDynamic(dy))
			continue
		}
		total += t.Shape.Numel()
		fmt.Fprintf(w, "  %-16s %-12v %9d elements  %s\n", n, t.Shape, t.Shape.Numel(), partition.ByteSize(4*t.Shape.Numel()))
	}
	fmt.Fprintf(w, "  total %d elements, %s\n", total, partition.ByteSize(4*total))
	if d := byKind[dsl.KindData]; len(d) > 0 {
		if o := g.Data.Online; o != nil {
			fmt.Fprintf(w, "data (the online source %s; rows are checked as they arrive): %s\n", o.Source(g.Data.CSV), describeDeclared(g, d))
		} else if g.Data.Eval != nil {
			fmt.Fprintf(w, "data (%d rows, %d held out): %s\n", rows, held, describeDeclared(g, d))
		} else {
			fmt.Fprintf(w, "data (%d rows): %s\n", rows, describeDeclared(g, d))
		}
	}
	if s := byKind[dsl.KindState]; len(s) > 0 {
		fmt.Fprintf(w, "optimizer state (%d): %s\n", len(s), describeVars(g, s))
	}
	if sp := rowSets(g); len(sp) > 0 {
		fmt.Fprintf(w, "row-sparse (%d): %s\n", len(sp), strings.Join(sp, "; "))
	}
	for _, sec := range []dsl.Section{dsl.Forward, dsl.Backward, dsl.Optimize} {
		counts := map[string]int{}
		n := 0
		for _, op := range g.Ops {
			if op.Section == sec {
				counts[op.Type]++
				n++
			}
		}
		if n == 0 {
			continue
		}
		label := map[dsl.Section]string{dsl.Forward: "forward ops", dsl.Backward: "backward ops (generated)", dsl.Optimize: "optimize ops (generated)"}[sec]
		if sec == dsl.Optimize && g.Train != nil && g.Train.Optimizer != nil {
			label += ", optimizer " + optName(g.Train.Optimizer)
		}
		if sec == dsl.Optimize {
			for _, p := range g.ParamOptimizers() {
				label += fmt.Sprintf(", %s: %s", p, optName(g.Vars[p].Optimizer))
			}
		}
		fmt.Fprintf(w, "%s: %d (%s)\n", label, n, countList(counts))
	}
	if t := g.Train; t != nil {
		fmt.Fprintf(w, "train: loss %s", t.Loss)
		if len(t.Metrics) > 0 {
			fmt.Fprintf(w, ", metrics %s", strings.Join(t.Metrics, ", "))
		}
		if t.Epochs > 0 {
			fmt.Fprintf(w, ", batch %d, epochs %d", t.Batch, t.Epochs)
		} else {
			fmt.Fprintf(w, ", batch %d, steps %d", t.Batch, t.Steps)
		}
		if c := t.Clip; c != nil {
			var parts []string
			if c.Value > 0 {
				parts = append(parts, fmt.Sprintf("each element to ±%g", c.Value))
			}
			if c.Norm > 0 {
				parts = append(parts, fmt.Sprintf("global norm to %g", c.Norm))
			}
			fmt.Fprintf(w, ", gradients clipped: %s", strings.Join(parts, ", "))
		}
		fmt.Fprintln(w)
	}
}

// rowSets describes the row-sparse variables: each row set (a row
// gradient) with its type and how many other values hold its rows.
func rowSets(g *dsl.Graph) []string {
	holders := map[string]int{}
	for n, t := range g.Types {
		if t.Sparse() && t.RowSet != n {
			holders[t.RowSet]++
		}
	}
	var out []string
	for n, t := range g.Types {
		if t.Sparse() && t.RowSet == n {
			out = append(out, fmt.Sprintf("%s %s[%s, ...] rows<=%d (%d more values hold its rows)", n, t.DType, strings.Trim(t.Shape[:1].String(), "[]"), t.MaxRows, holders[n]))
		}
	}
	sort.Strings(out)
	return out
}

// describeDynamic says how a dynamic table admits and evicts rows.
func describeDynamic(dy *dsl.Dynamic) string {
	parts := []string{"rows as keys are admitted"}
	if dy.MinCount > 1 {
		parts = append(parts, fmt.Sprintf("min_count %d", dy.MinCount))
	}
	if dy.Probability > 0 && dy.Probability < 1 {
		parts = append(parts, fmt.Sprintf("probability %g", dy.Probability))
	}
	if dy.TTLSteps > 0 {
		parts = append(parts, fmt.Sprintf("ttl %d steps", dy.TTLSteps))
	}
	if dy.Capacity > 0 {
		parts = append(parts, fmt.Sprintf("capacity %d (%s)", dy.Capacity, dy.Policy))
	}
	return strings.Join(parts, ", ")
}

func optName(o *dsl.Optimizer) string {
	name := o.Type
	if name == "" {
		name = "custom"
	}
	var hs []string
	for k, v := range o.Hyper {
		if k == "weight_decay" && v == 0 {
			continue // none
		}
		hs = append(hs, fmt.Sprintf("%s=%g", k, v))
	}
	sort.Strings(hs)
	out := name + " (" + strings.Join(hs, ", ") + ")"
	if sc := o.Schedule; sc != nil {
		out += ", lr schedule " + sc.Kind
		if sc.Warmup > 0 {
			out += fmt.Sprintf(" with %d warmup steps", sc.Warmup)
		}
	}
	return out
}

// describeDeclared shows declared shapes, with the batch dimension as "batch".
func describeDeclared(g *dsl.Graph, names []string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		v := g.Vars[n]
		parts[i] = n + " " + v.DType.String() + v.Shape.String()
	}
	return strings.Join(parts, ", ")
}

func describeVars(g *dsl.Graph, names []string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + " " + g.Types[n].String()
	}
	return strings.Join(parts, ", ")
}

func countList(c map[string]int) string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s x%d", k, c[k])
	}
	return strings.Join(parts, ", ")
}

func newOpsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ops",
		Short:   "List the op catalog",
		Example: "  psgraph ops",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			w := c.OutOrStdout()
			for _, n := range ops.Names() {
				d, _ := ops.Lookup(n)
				tag := ""
				if d.Internal {
					tag = " [internal]"
				}
				var attrs []string
				for _, a := range d.Attrs {
					attrs = append(attrs, a.Name)
				}
				sig := fmt.Sprintf("%s(%s) -> %s", n, strings.Join(d.Inputs, ", "), strings.Join(d.Outputs, ", "))
				if len(attrs) > 0 {
					sig += " {" + strings.Join(attrs, ", ") + "}"
				}
				fmt.Fprintf(w, "%-60s %s%s\n", sig, d.Doc, tag)
			}
			return nil
		},
	}
}
