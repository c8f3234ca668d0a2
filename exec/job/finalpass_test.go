package job

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/trainer"
)

// The summary of a run over a streamed file is the mean of its last 100
// steps' batch values unless --final-pass asks for a pass over the whole
// file (logged as a phase with its progress); data in memory gets the
// pass unless --final-pass=false, which gives the same mean of the last
// 100 steps.
func TestFinalPassIsTheUsersChoice(t *testing.T) {
	type result struct {
		sum  *trainer.Summary
		log  string
		tail float64 // the mean loss of the last 100 steps in the metrics file
	}
	run := func(g *dsl.Graph, fp trainer.FinalPass) result {
		var b bytes.Buffer
		clock := time.Unix(0, 0)
		metrics := filepath.Join(t.TempDir(), "m.jsonl")
		sum, err := trainer.Train(context.Background(), g, trainer.RunOptions{
			Role: "local", Steps: 120, LogEvery: 1, Metrics: metrics, Log: zerolog.New(&b), FinalPass: fp,
			Clock: func() time.Time { clock = clock.Add(time.Second); return clock },
		})
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(metrics)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var losses []float64
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var m struct{ Loss float64 }
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			losses = append(losses, m.Loss)
		}
		var tail float64
		for _, l := range losses[len(losses)-100:] {
			tail += l
		}
		return result{sum, b.String(), tail / 100}
	}
	mem, stream := ctrGraphs(t, 150)
	const pass = `"message":"evaluating the training data"`
	for _, c := range []struct {
		name     string
		g        *dsl.Graph
		fp       trainer.FinalPass
		wantPass bool
	}{
		{"streamed", stream, trainer.FinalPassAuto, false},
		{"streamed --final-pass", stream, trainer.FinalPassOn, true},
		{"in memory", mem, trainer.FinalPassAuto, true},
		{"in memory --final-pass=false", mem, trainer.FinalPassOff, false},
	} {
		r := run(c.g, c.fp)
		if got := strings.Contains(r.log, pass); got != c.wantPass {
			t.Errorf("%s: the log shows a pass over the training data: %v, want %v", c.name, got, c.wantPass)
		}
		if tailOnly := math.Abs(r.sum.Loss-r.tail) < 1e-6; tailOnly == c.wantPass {
			t.Errorf("%s: summary loss %g, mean of the last 100 steps %g: want the tail mean %v", c.name, r.sum.Loss, r.tail, !c.wantPass)
		}
	}
}
