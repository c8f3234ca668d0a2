package job

import (
	"context"
	"fmt"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/trainer"
)

// dynamicLive is the live rows of table emb over the pservers' summaries
// of the last job runJobInmem ran.
func dynamicLive(t *testing.T, table string) int64 {
	t.Helper()
	servedMu.Lock()
	defer servedMu.Unlock()
	var live int64
	for _, s := range served {
		live += s.Tables[table].Live
	}
	served = nil
	return live
}

func TestDynamicSplitRunsInmem(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprint(async), func(t *testing.T) {
			g, _ := dynamicJob(t, "{dim: 4, min_count: 2}")
			local, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 20, Batch: 16, Log: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			servedMu.Lock()
			served = nil
			servedMu.Unlock()
			runInmemJob(t, g, 2, 2, async, trainer.RunOptions{Steps: 20, Batch: 8, Log: zerolog.Nop()}, 0)
			t.Logf("local %+v dist live %d", local.Tables, dynamicLive(t, "emb"))
		})
	}
}
