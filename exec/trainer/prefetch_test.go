package trainer

import (
	"bytes"
	"context"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/data/criteo"
	"github.com/psgraph/psgraph/internal/testfix"
)

// A run over a streamed file has each step's batch parsed while the step
// before it computes: every Fill after the first takes the batch its
// data.Prefetch parsed ahead, so the trainer asked for it with the next
// step's start, as the only trainer and as trainer 1 of 2 (whose turns
// are every other batch), over more than one pass of the file. The
// results are the same either way (TestStreamedDataTrainsLikeMemory);
// only this count sees the batches parsed on the step's path instead.
func TestStreamedStepsAreParsedAhead(t *testing.T) {
	const rows, batch, steps = 100, 8, 20
	var tsv bytes.Buffer
	if _, err := criteo.Generate(&tsv, criteo.Options{Rows: rows, Seed: 2, Vocab: 100}); err != nil {
		t.Fatal(err)
	}
	g := testfix.ModelWith(t, testfix.CTRModel(500, batch, steps, true), map[string][]byte{"train.tsv": tsv.Bytes()})
	for _, c := range []struct{ index, count int }{{0, 1}, {1, 2}} {
		ctx, cancel := context.WithCancel(context.Background())
		r := &run{ctx: ctx, cancel: cancel, g: g, opt: RunOptions{Role: "local", Log: zerolog.Nop(), TrainerIndex: c.index, TrainerCount: c.count}}
		_, err := r.train()
		r.close()
		cancel()
		if err != nil {
			t.Fatalf("trainer %d of %d: %v", c.index, c.count, err)
		}
		if r.ahead == nil {
			t.Fatalf("trainer %d of %d: a streamed file read without a data.Prefetch", c.index, c.count)
		}
		if got := r.ahead.Served(); got != steps-1 {
			t.Errorf("trainer %d of %d: %d of %d steps' batches were parsed ahead, want every one after the first (%d)", c.index, c.count, got, steps, steps-1)
		}
	}
}
