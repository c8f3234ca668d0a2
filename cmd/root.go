// Package cmd holds psgraph's command line. Each command parses flags into
// an options struct and calls into dsl, partition or exec; errors are
// printed once, by Main.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/launch"
	"github.com/psgraph/psgraph/exec/node"
)

// Version is set at build time with -ldflags "-X github.com/psgraph/psgraph/cmd.Version=...".
var Version = "dev"

// usageError marks a command-line mistake (exit code 2), as does
// node.UsageError, a flag of run's pserver and trainer roles.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// Process is the psgraph process: Main on its command line and standard
// streams, then its peak memory to a parent that asked (psgraph train);
// the exit code. main.go calls it, and so do cmd's tests, whose binary
// runs as psgraph.
func Process() int {
	code := Main(os.Args[1:], os.Stdout, os.Stderr)
	launch.ReportPeakRSS()
	return code
}

// Main runs the command line and returns the exit code: 0 on success, 1 for
// bad input or a failed run, 2 for usage errors.
//
// The first SIGTERM or SIGINT ends the command's context: most commands
// stop at once, and a run of an online source finishes its step (a split
// job the step its trainers agree on), checkpoints and exits 0. A second
// one ends the hard context too (hardContext), which such a run works
// under: it stops at once (exit 1; checkpoints are written whole or not
// at all), and psgraph exits if it has not within hardExit.
func Main(args []string, stdout, stderr io.Writer) int {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	launch.SignalReady() // to a psgraph train that passes its signal on
	hard, kill := context.WithCancel(context.Background())
	defer kill()
	ctx, stop := context.WithCancel(context.WithValue(hard, hardKey{}, hard))
	defer stop()
	done := make(chan struct{})
	defer close(done)
	var first atomic.Value // the first signal, once it came
	go func() {
		select {
		case s := <-sigs:
			first.Store(s)
			stop()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			fmt.Fprintf(stderr, "psgraph: a second %v: stopping at once\n", s)
			kill()
		case <-done:
			return
		}
		select {
		case <-time.After(hardExit):
			fmt.Fprintf(stderr, "psgraph: still running %v after the second signal: exiting\n", hardExit)
			os.Exit(1)
		case <-done:
		}
	}()
	root := NewRootCmd(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	if s, ok := first.Load().(os.Signal); ok && errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "psgraph: stopped by a signal (%v) before the end\n", s)
		return 1
	}
	fmt.Fprintf(stderr, "psgraph: %v\n", err)
	var u usageError
	var nu *node.UsageError
	if errors.As(err, &u) || errors.As(err, &nu) {
		fmt.Fprintf(stderr, "Run 'psgraph --help' for usage.\n")
		return 2
	}
	return 1
}

// hardKey keys the hard context in a command's context (Main).
type hardKey struct{}

// hardExit is how long psgraph waits for a command to stop after the
// second signal before it exits.
const hardExit = 10 * time.Second

// hardContext is the context a command that stops gracefully on the
// first signal works under: it ends at the second (Main), never at the
// first.
func hardContext(ctx context.Context) context.Context {
	if h, ok := ctx.Value(hardKey{}).(context.Context); ok {
		return h
	}
	return context.WithoutCancel(ctx)
}

// NewRootCmd builds the command tree.
func NewRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "psgraph",
		Short: "A parameter server built from operator graphs",
		Long: `psgraph trains models written as YAML operator graphs. The same runtime
executes the whole graph on one node or, after 'psgraph split', the trainer
and pserver subgraphs of a distributed job.`,
		Example:       "  psgraph run --role local examples/digits-mlp.yaml\n  psgraph check examples/digits-mlp.yaml\n  psgraph train examples/digits-mlp.yaml --trainers 2 --pservers 2",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
	}
	root.SuggestionsMinimumDistance = 2
	root.Args = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			hint := ""
			if sug := c.SuggestionsFor(args[0]); len(sug) > 0 {
				hint = fmt.Sprintf(" (did you mean %q?)", closest(args[0], sug))
			}
			var names []string
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() && sub.Name() != "help" {
					names = append(names, sub.Name())
				}
			}
			return usagef("unknown command %q%s; commands: %s", args[0], hint, strings.Join(names, ", "))
		}
		return nil
	}
	root.RunE = func(c *cobra.Command, args []string) error {
		return usagef("missing command; try 'psgraph run --role local MODEL.yaml' or 'psgraph check MODEL.yaml'")
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newRunCmd(), newTrainCmd(), newEvalCmd(), newPredictCmd(), newServeCmd(), newCheckCmd(), newSplitCmd(), newOpsCmd(), newVizCmd(), newK8sCmd(), newGenCmd(), newVersionCmd())
	// Cobra adds help and completion when it runs; add them now so they
	// get examples like every other command.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Example = "  psgraph help split"
		case "completion":
			c.Example = "  source <(psgraph completion bash)\n  psgraph completion zsh > \"${fpath[1]}/_psgraph\""
			for _, sh := range c.Commands() {
				sh.Example = fmt.Sprintf("  psgraph completion %s --help", sh.Name())
			}
		}
	}
	return root
}

// exactArgs is cobra.ExactArgs reporting a usage error.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s expects %s, got %d arguments", c.CommandPath(), what, len(args))
		}
		return nil
	}
}

// logFlags are the logging flags every running command takes.
type logFlags struct {
	format string
	level  string
	every  int
}

func (l *logFlags) add(c *cobra.Command) {
	l.addFormat(c)
	c.Flags().StringVar(&l.level, "log-level", "info", "least severe log lines shown: debug (connection retries and other detail), info, warn or error")
	c.Flags().IntVar(&l.every, "log-every", 0, "log progress every N steps (0: about ten lines per run)")
}

// addFormat adds --log-format only, for commands that take no steps.
func (l *logFlags) addFormat(c *cobra.Command) {
	c.Flags().StringVar(&l.format, "log-format", "console", "log format on stderr: console or json")
}

func (l *logFlags) logger(w io.Writer, role string) (zerolog.Logger, error) {
	var out io.Writer = w
	switch l.format {
	case "json":
	case "console":
		color := false
		if f, ok := w.(*os.File); ok {
			color = isatty.IsTerminal(f.Fd())
		}
		out = zerolog.ConsoleWriter{Out: w, NoColor: !color, TimeFormat: "15:04:05"}
	default:
		return zerolog.Logger{}, usagef("--log-format must be console or json, got %q", l.format)
	}
	if l.level == "" { // a command without --log-level
		l.level = "info"
	}
	level, err := zerolog.ParseLevel(l.level)
	if err != nil || level > zerolog.ErrorLevel || level < zerolog.DebugLevel {
		return zerolog.Logger{}, usagef("--log-level must be debug, info, warn or error, got %q", l.level)
	}
	return zerolog.New(out).Level(level).With().Timestamp().Str("role", role).Logger(), nil
}

// closest returns the candidate nearest to s by edit distance (cobra lists
// its suggestions in command order, so "vis" would get "k8s" before "viz").
func closest(s string, candidates []string) string {
	best, bestD := candidates[0], -1
	for _, c := range candidates {
		if d := dsl.EditDistance(s, c); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	return best
}
