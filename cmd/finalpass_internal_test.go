package cmd

import (
	"testing"

	"github.com/psgraph/psgraph/exec/trainer"
)

// --final-pass left out is the trainer's default (a pass over data in
// memory, none over a streamed file); given, it is on or off, and train
// hands it on to its trainers as given.
func TestFinalPassFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want trainer.FinalPass
		arg  string
	}{
		{nil, trainer.FinalPassAuto, ""},
		{[]string{"--final-pass"}, trainer.FinalPassOn, "true"},
		{[]string{"--final-pass=true"}, trainer.FinalPassOn, "true"},
		{[]string{"--final-pass=false"}, trainer.FinalPassOff, "false"},
	} {
		for _, cmd := range []string{"run", "train"} {
			c0 := newRunCmd()
			if cmd == "train" {
				c0 = newTrainCmd()
			}
			if err := c0.ParseFlags(c.args); err != nil {
				t.Fatal(err)
			}
			if got := finalPass(c0); got != c.want {
				t.Errorf("%s %v: %v, want %v", cmd, c.args, got, c.want)
			}
			if got := finalPassArg(c0); got != c.arg {
				t.Errorf("%s %v: passes on %q, want %q", cmd, c.args, got, c.arg)
			}
		}
	}
}
