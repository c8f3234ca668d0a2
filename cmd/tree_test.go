package cmd

import (
	"io"
	"regexp"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		walk(sub, f)
	}
}

func TestEveryCommandHasAnExample(t *testing.T) {
	t.Parallel()
	n := 0
	walk(NewRootCmd(io.Discard, io.Discard), func(c *cobra.Command) {
		n++
		if c.Example == "" {
			t.Errorf("%s has no Example in its --help", c.CommandPath())
		}
	})
	if n < 10 {
		t.Fatalf("walked only %d commands: is completion missing from the tree?", n)
	}
}

// A flag name means one thing: same type everywhere, lowercase-dashed.
func TestFlagNamesAreConsistent(t *testing.T) {
	t.Parallel()
	// --pservers is a count for split and train but the endpoint list for
	// run (docs/runtime.md); kept for compatibility.
	exceptions := map[string]bool{"pservers": true}
	kebab := regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)
	types := map[string]string{}
	where := map[string]string{}
	walk(NewRootCmd(io.Discard, io.Discard), func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if !kebab.MatchString(f.Name) {
				t.Errorf("%s --%s is not lowercase-dashed", c.CommandPath(), f.Name)
			}
			if exceptions[f.Name] {
				return
			}
			typ := f.Value.Type() + " -" + f.Shorthand
			if prev, ok := types[f.Name]; ok && prev != typ {
				t.Errorf("--%s is %q in %s but %q in %s", f.Name, prev, where[f.Name], typ, c.CommandPath())
			}
			types[f.Name], where[f.Name] = typ, c.CommandPath()
		})
	})
}
