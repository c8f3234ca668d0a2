package stream

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The round robin's decisions, event by event: strict while every
// partition holds records, strict without a bound (idle_after: never),
// and with one a partition empty while others hold records passed over
// once it was so for IdleAfter, logged once an episode, back in its turn
// once it has records.
func TestTurns(t *testing.T) {
	t0 := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	show := func(c Choice) string {
		var out []string
		if c.Take >= 0 {
			out = append(out, fmt.Sprintf("take %d", c.Take))
		} else if c.Until.IsZero() {
			out = append(out, "wait for records")
		} else {
			out = append(out, fmt.Sprintf("wait until %gs", c.Until.Sub(t0).Seconds()))
		}
		if len(c.Idle) > 0 {
			out = append(out, fmt.Sprintf("idle %v", c.Idle))
		}
		if len(c.Back) > 0 {
			out = append(out, fmt.Sprintf("back %v", c.Back))
		}
		return strings.Join(out, ", ")
	}
	type step struct {
		has  string // a 1 per partition holding records
		at   float64
		want string
	}
	for _, c := range []struct {
		name  string
		idle  time.Duration
		turn  int
		steps []step
		skips int64
	}{
		{"every partition holds records: strict", 10 * time.Second, 1, []step{
			{"111", 0, "take 1"}, {"111", 0, "take 2"}, {"111", 0, "take 0"}, {"111", 0, "take 1"},
		}, 0},
		{"never: an empty partition holds the others up", 0, 0, []step{
			{"111", 0, "take 0"}, {"101", 0, "wait for records"}, {"101", 3600, "wait for records"}, {"111", 3600, "take 1"},
		}, 0},
		{"an empty partition is passed over after idle_after", 10 * time.Second, 0, []step{
			{"101", 0, "take 0"},
			{"101", 1, "wait until 10s"}, // partition 1 empty since 0s, while 0 and 2 hold records
			{"101", 5, "wait until 10s"},
			{"101", 11, "take 2, idle [1]"},
			{"101", 11, "take 0"},
			{"101", 12, "take 2"}, // passed over again, said once
			{"111", 13, "take 0, back [1]"},
			{"111", 13, "take 1"},
			{"101", 14, "take 2"},
			{"101", 14, "take 0"},
			{"101", 14, "wait until 24s"}, // a new episode: its clock starts again
		}, 2},
		{"the clock runs only while another holds records", 10 * time.Second, 0, []step{
			{"00", 0, "wait for records"},
			{"00", 100, "wait for records"},
			{"01", 200, "wait until 210s"},
			{"00", 205, "wait for records"},
			{"01", 206, "wait until 216s"},
			{"01", 216, "take 1, idle [0]"},
			{"01", 216, "take 1"},
		}, 2},
		{"two empty partitions idle together", 10 * time.Second, 0, []step{
			{"0001", 0, "wait until 10s"},
			{"0001", 10, "take 3, idle [0 1 2]"},
			{"0001", 10, "take 3"},
		}, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := NewTurns(len(c.steps[0].has), c.turn, c.idle)
			for i, s := range c.steps {
				has := make([]bool, len(s.has))
				for j, ch := range s.has {
					has[j] = ch == '1'
				}
				if got := show(tr.Next(has, at(s.at))); got != s.want {
					t.Fatalf("step %d (%s at %gs): %s, want %s", i, s.has, s.at, got, s.want)
				}
			}
			if tr.Skips() != c.skips {
				t.Errorf("%d turns passed over, want %d", tr.Skips(), c.skips)
			}
		})
	}
}
