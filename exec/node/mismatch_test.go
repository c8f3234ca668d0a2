package node

import (
	"strings"
	"testing"
	"time"

	"github.com/psgraph/psgraph/internal/testfix"
)

// Hand-started trainers given different --steps or --batch are refused
// as soon as the pserver has heard both, over loopback TCP: the pserver
// and both trainers fail with one message naming the flag and both
// values. Before, different steps hung the job at the shorter trainer's
// last step, and different batches broke the data stream rule silently.
func TestMismatchedTrainerRefused(t *testing.T) {
	for _, c := range []struct {
		name, flag   string
		steps, batch [2]int
		values       [2]string
	}{
		{"steps", "--steps", [2]int{20, 30}, [2]int{0, 0}, [2]string{"--steps 20", "--steps 30"}},
		{"batch", "--batch", [2]int{20, 20}, [2]int{16, 8}, [2]string{"--batch 16", "--batch 8"}},
		// left out on one trainer: the model's train.steps (1000) and batch (16)
		{"model steps", "--steps", [2]int{0, 30}, [2]int{0, 0}, [2]string{"--steps 1000", "--steps 30"}},
		{"model batch", "--batch", [2]int{20, 20}, [2]int{0, 8}, [2]string{"--batch 16", "--batch 8"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := writePlan(t, testfix.TinyModel, 2, 1)
			addr := freeAddr(t)
			ps, _ := start(t, Options{Role: "pserver", Index: 0, Plan: plan, Listen: addr, ResumeStep: -1, TrainerTimeout: 10 * time.Second})
			var trainers []<-chan outcome
			for i := range 2 {
				tr, _ := start(t, Options{Role: "trainer", Index: i, Plan: plan, PServers: []string{addr}, Steps: c.steps[i], Batch: c.batch[i], StartStep: -1, ConnectTimeout: 20 * time.Second})
				trainers = append(trainers, tr)
			}
			want := "give every trainer the same " + c.flag
			check := func(name string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s ran the mismatched job to its end", name)
				}
				msg := err.Error()
				if !strings.Contains(msg, want) || !strings.Contains(msg, c.values[0]) || !strings.Contains(msg, c.values[1]) {
					t.Errorf("%s: %v\nwant the flag and both values (%s, %s) and %q", name, err, c.values[0], c.values[1], want)
				}
			}
			check("pserver-0", wait(t, "pserver-0", ps).err)
			for i, tr := range trainers {
				check("trainer-"+string(rune('0'+i)), wait(t, "trainer", tr).err)
			}
		})
	}
}
