package cmd

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/exec/data/criteo"
)

func newGenCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "gen criteo -o FILE --rows N",
		Short:   "Write a generated data set",
		Long:    `Gen writes generated data sets for tests and benchmarks.`,
		Example: "  psgraph gen criteo -o train.tsv --rows 1000000 --seed 1",
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("psgraph gen has no data set %q; data sets: criteo", args[0])
			}
			return usagef("gen needs a data set: psgraph gen criteo -o FILE --rows N")
		},
	}
	c.AddCommand(newGenCriteoCmd())
	return c
}

type genCriteoOptions struct {
	out string
	opt criteo.Options
}

func newGenCriteoCmd() *cobra.Command {
	o := &genCriteoOptions{}
	c := &cobra.Command{
		Use:   "criteo -o FILE --rows N",
		Short: "Write click logs in the Criteo display-advertising format",
		Long: `Criteo writes N lines in the format of the Criteo display-advertising
(Kaggle) data set: tab-separated label (0/1), 13 integer features and 26
categorical features of 8 hex digits, any feature possibly empty. Each
categorical column draws its ids Zipf(--zipf) over --vocab ids; the label
depends on the ids of 8 columns and on 3 integer features, so a model can
learn it. The same flags write the same file. Read it with
  data: {csv: FILE, delimiter: tab, label: {name: y, column: 0},
         features: {name: dense, columns: [1, 14], fill: 0, transform: log},
         ids: {name: cat, columns: [14, 40], hash_buckets: 100000}}`,
		Example: "  psgraph gen criteo -o train.tsv --rows 1000000 --seed 1\n  psgraph gen criteo -o tiny.tsv --rows 1000 --vocab 100 --zipf 1.5",
		Args:    exactArgs(0, "no arguments"),
		RunE:    func(c *cobra.Command, args []string) error { return o.run(c) },
	}
	f := c.Flags()
	f.StringVarP(&o.out, "output", "o", "", "file to write (required)")
	f.Int64Var(&o.opt.Rows, "rows", 0, "number of lines (required)")
	f.Uint64Var(&o.opt.Seed, "seed", 1, "seed of every random draw")
	f.IntVar(&o.opt.Vocab, "vocab", criteo.DefaultVocab, "ids per categorical column")
	f.Float64Var(&o.opt.Zipf, "zipf", criteo.DefaultZipf, "exponent s > 1 of the ids' Zipf distribution")
	return c
}

func (o *genCriteoOptions) run(c *cobra.Command) error {
	if o.out == "" {
		return usagef("gen criteo needs -o FILE, the file to write")
	}
	if err := o.opt.Check(); err != nil {
		return usagef("gen criteo: --%v", err)
	}
	// Write beside the target and rename, so that an interrupted run leaves
	// no truncated file that looks complete.
	tmp, err := os.CreateTemp(filepath.Dir(o.out), filepath.Base(o.out)+".*.tmp")
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", o.out, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("cannot write %s: %w", o.out, err)
	}
	if err := criteo.Write(tmp, o.opt); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", o.out, err)
	}
	st, err := tmp.Stat()
	if err == nil {
		err = tmp.Close()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), o.out)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", o.out, err)
	}
	fmt.Fprintf(c.OutOrStdout(), "wrote %d rows to %s (%.1f MiB)\n", o.opt.Rows, o.out, float64(st.Size())/(1<<20))
	return nil
}
