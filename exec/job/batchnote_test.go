package job

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/trainer"
)

// A loss over in-batch negatives (the two-tower model, batch 32) depends
// on the rows batched together, so its evaluation in chunks of 1024 rows
// says so: psgraph eval's JSON and a run's summary carry a note naming
// the coupled values, where their rows meet, the chunk and the training
// batch, and the run logs it as a warning. A per-row model's evaluations
// (digits) carry none.
func TestBatchCoupledEvaluationSaysSo(t *testing.T) {
	g := load(t, zooDir+"two-tower.yaml")
	res, err := evaluate.EvalModel(context.Background(), g, evaluate.EvalOptions{InitFrom: zooDir + "two-tower-local.safetensors", Data: zooDir + "zoo.tsv", Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"loss and recall10 depend on the rows batched together (scores is [batch, batch], at ", "two-tower.yaml:", "chunks of 1024 rows", "training batch of 32"}
	js, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	note, _ := m["note"].(string)
	for _, w := range want {
		if !strings.Contains(note, w) {
			t.Errorf("eval's JSON %s: want a note containing %q", js, w)
		}
	}

	var log strings.Builder
	sum, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 3, InitFrom: zooDir + "two-tower-init.safetensors",
		FinalPass: trainer.FinalPassOn, Log: zerolog.New(&log)})
	if err != nil {
		t.Fatal(err)
	}
	js, err = json.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	note, _ = m["note"].(string)
	for _, w := range want {
		if !strings.Contains(note, w) || !strings.Contains(log.String(), w) {
			t.Errorf("the run's summary %s and log: want a note and a warning containing %q; log:\n%s", js, w, log.String())
		}
	}

	digits := load(t, "../../examples/digits-mlp.yaml")
	plain, err := trainer.Train(context.Background(), digits, trainer.RunOptions{Role: "local", Steps: 3, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if js, _ := json.Marshal(plain); plain.Note != "" || strings.Contains(string(js), "note") {
		t.Errorf("digits' summary %s has a note", js)
	}
}
