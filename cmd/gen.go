package cmd

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/exec/data/criteo"
	"github.com/psgraph/psgraph/internal/atomicfile"
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
	out   string
	probs string
	opt   criteo.Options
}

func newGenCriteoCmd() *cobra.Command {
	o := &genCriteoOptions{}
	c := &cobra.Command{
		Use:   "criteo -o FILE --rows N",
		Short: "Write click logs in the Criteo display-advertising format",
		Long: `Criteo writes N lines in the format of the Criteo display-advertising
(Kaggle) data set: tab-separated label (0/1), 13 integer features and 26
categorical features of 8 hex digits, any feature possibly empty
(TestFormat). Each categorical column draws its ids Zipf(--zipf) over
--vocab ids (TestZipfSkew); the label depends on the ids of 8 columns and
on 3 integer features, so a model can learn it (TestLabelFollowsIDs). The
same flags write the same file (TestDeterministicBySeed), and without
--truth fm and --history the file is the one earlier versions wrote
(TestDefaultOutputIsUnchanged).

--truth fm adds a factorization machine's interactions to the label's
logit: a hidden 4-dim latent vector per id of those 8 columns, and the sum
of <v_i, v_j> over their pairs; a linear model then falls far short of
the best AUC and an interaction model beats it
(TestGenFMTruthNeedsInteractions). --history N appends a 41st column: 0
to N ids of C1's vocabulary separated by |, interacting with the row's C1
id in the logit. Neither changes the 39 features of a line
(TestTruthAndHistoryKeepTheFeatures); docs/dsl.md states the formulas
(TestProbsAreTheTruthOfEachLine). --interaction S (with --truth fm)
multiplies the pairwise term by S: the strength of the interactions
against the first-order part; S = 1 writes the file --truth fm always
wrote (TestInteractionScalesThePairwiseTerm). A stronger S raises the
Bayes-optimal AUC and lowers what a linear model reaches
(TestGenInteractionStrength).

--drift F slides each categorical column's vocabulary over the file by
F x --vocab ids: new ids appear at the head of the Zipf distribution, old
ones fall to its tail and out. Of the distinct ids of the last tenth of the
file, about min(1, 0.9F / (1 + 0.1F)) are not in its first tenth when the
file draws every id of the windows (TestDriftShare; docs/dsl.md states the
window exactly).

On stderr gen reports the click rate and the Bayes-optimal AUC of the file:
the AUC its true click probabilities score against the labels drawn from
them, and its expectation over label draws (TestGenReportsBayesAUC); and
the variance over the rows of the logit's first-order part and of its
interactions (TestStatsVariancesOfTheLogitsParts);
--probs FILE writes each row's probability. Read the file with
  data: {csv: FILE, delimiter: tab, label: {name: y, column: 0},
         features: {name: dense, columns: [1, 14], fill: 0, transform: log},
         ids: {name: cat, columns: [14, 40], hash_buckets: 100000}}
and the history with an ids spec of its own:
         {name: hist, column: 40, separator: "|", max_len: N, hash_buckets: ...}`,
		Example: "  psgraph gen criteo -o train.tsv --rows 1000000 --seed 1\n  psgraph gen criteo -o tiny.tsv --rows 1000 --vocab 100 --zipf 1.5\n  psgraph gen criteo -o fm.tsv --rows 1000000 --truth fm --history 20\n  psgraph gen criteo -o strong.tsv --rows 300000 --vocab 1000 --truth fm --interaction 3\n  psgraph gen criteo -o drift.tsv --rows 3000000 --vocab 2000000 --drift 0.5",
		Args:    exactArgs(0, "no arguments"),
		RunE:    func(c *cobra.Command, args []string) error { return o.run(c) },
	}
	f := c.Flags()
	f.StringVarP(&o.out, "output", "o", "", "file to write (required)")
	f.Int64Var(&o.opt.Rows, "rows", 0, "number of lines (required)")
	f.Uint64Var(&o.opt.Seed, "seed", 1, "seed of every random draw")
	f.IntVar(&o.opt.Vocab, "vocab", criteo.DefaultVocab, "ids per categorical column")
	f.Float64Var(&o.opt.Zipf, "zipf", criteo.DefaultZipf, "exponent s > 1 of the ids' Zipf distribution")
	f.StringVar(&o.opt.Truth, "truth", "linear", "the label's model: linear, or fm (plus pairwise interactions of latent vectors of the ids)")
	f.Float64Var(&o.opt.Interaction, "interaction", criteo.DefaultInteraction, "with --truth fm, multiply the pairwise interactions in the label's logit by this (their strength against the first-order part)")
	f.IntVar(&o.opt.History, "history", 0, "append a history column of 0 to N ids of C1's vocabulary, separated by |, interacting with C1 in the label (0: none)")
	f.Float64Var(&o.opt.Drift, "drift", 0, "slide each categorical column's vocabulary by this share of --vocab over the file: new ids take the head of the distribution, old ones fade (0: none)")
	f.StringVar(&o.probs, "probs", "", "also write each row's true click probability to this file, one per line")
	return c
}

func (o *genCriteoOptions) run(c *cobra.Command) error {
	if o.out == "" {
		return usagef("gen criteo needs -o FILE, the file to write")
	}
	if !(o.opt.Interaction > 0) { // Options read 0 as the default
		return usagef("gen criteo: --interaction (the factor of the fm truth's pairwise term) must be a number > 0, got %g", o.opt.Interaction)
	}
	if err := o.opt.Check(); err != nil {
		return usagef("gen criteo: --%v", err)
	}
	// Written beside the target and renamed, so that an interrupted run
	// leaves no truncated file that looks complete.
	tmp, err := atomicfile.Create(o.out)
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", o.out, err)
	}
	defer tmp.Abort()
	if o.probs != "" {
		probs, err := os.Create(o.probs)
		if err != nil {
			return fmt.Errorf("cannot write %s: %w", o.probs, err)
		}
		defer probs.Close()
		o.opt.Probs = probs
	}
	stats, err := criteo.Generate(tmp, o.opt)
	if f, ok := o.opt.Probs.(*os.File); err == nil && ok {
		err = f.Close()
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", o.out, err)
	}
	st, err := tmp.Stat()
	if err == nil {
		err = tmp.Commit()
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", o.out, err)
	}
	fmt.Fprintf(c.OutOrStdout(), "wrote %d rows to %s (%.1f MiB)\n", o.opt.Rows, o.out, float64(st.Size())/(1<<20))
	fmt.Fprintf(c.ErrOrStderr(), "%s: click rate %.6f; the true probabilities score AUC %.6f against the drawn labels (expected over label draws %.6f) and log loss %.6f: the Bayes-optimal model's\n",
		o.out, float64(stats.Clicks)/float64(stats.Rows), stats.AUC, stats.ExpectedAUC, stats.LogLoss)
	fmt.Fprintf(c.ErrOrStderr(), "%s: the logit's first-order part has variance %.4f over the rows, its interactions %.4f (--truth %s --interaction %g)\n",
		o.out, stats.FirstOrderVar, stats.InteractionVar, o.opt.Truth, o.opt.Interaction)
	return nil
}
