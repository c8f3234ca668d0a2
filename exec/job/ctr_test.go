package job

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/trainer"
	"github.com/psgraph/psgraph/internal/testfix"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/data/criteo"
)

// ctrGraphs writes a generated Criteo file of rows rows and loads the CTR
// model on it twice: in memory and streamed.
func ctrGraphs(t *testing.T, rows int64) (mem, stream *dsl.Graph) {
	t.Helper()
	var tsv bytes.Buffer
	if _, err := criteo.Generate(&tsv, criteo.Options{Rows: rows, Seed: 2, Vocab: 100}); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"train.tsv": tsv.Bytes()}
	mem = testfix.ModelWith(t, testfix.CTRModel(500, 16, 40, false), files)
	stream = testfix.ModelWith(t, testfix.CTRModel(500, 16, 40, true), files)
	if !stream.Data.Stream || mem.Data.Stream {
		t.Fatal("the stream model does not stream")
	}
	return mem, stream
}

// Training on a streamed file ends with exactly the parameters training on
// the file in memory ends with, locally and as a job of 2 trainers (whose
// streams skip each other's rows), over several epochs of a file whose
// row count is not a multiple of the batch; the summaries over the whole
// data (--final-pass) agree.
func TestStreamedDataTrainsLikeMemory(t *testing.T) {
	mem, stream := ctrGraphs(t, 150)
	dir := t.TempDir()
	run := func(g *dsl.Graph, name string) *trainer.Summary {
		save := filepath.Join(dir, name+".safetensors")
		sum, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Save: save, Log: zerolog.Nop(), FinalPass: trainer.FinalPassOn})
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	sm, ss := run(mem, "mem"), run(stream, "stream")
	compareParams(t, filepath.Join(dir, "mem.safetensors"), filepath.Join(dir, "stream.safetensors"), 0)
	if math.Abs(sm.Loss-ss.Loss) > 1e-6 || math.Abs(sm.Metrics["acc"]-ss.Metrics["acc"]) > 1e-6 {
		t.Errorf("summaries differ: in memory loss %g acc %g, streamed loss %g acc %g", sm.Loss, sm.Metrics["acc"], ss.Loss, ss.Metrics["acc"])
	}
	// The model's table is sharded in a job: the pservers save its shards
	// and runTableJob merges them with trainer 0's file.
	distMem := runTableJob(t, mem, 2, 1, false, trainer.RunOptions{Steps: 40, Batch: 8, Log: zerolog.Nop()})
	distStream := runTableJob(t, stream, 2, 1, false, trainer.RunOptions{Steps: 40, Batch: 8, Log: zerolog.Nop()})
	compareParams(t, distMem, distStream, 0)
	compareParams(t, filepath.Join(dir, "mem.safetensors"), distStream, 1e-4) // 2 x 8 rows per step = 16 locally
}

// Evaluating a stream in chunks gives the whole-set loss and metrics: the
// row-weighted mean of the chunks' means, with a short last chunk.
func TestEvaluateStreamInChunks(t *testing.T) {
	mem, stream := ctrGraphs(t, 150)
	p, err := program.Compile(mem, program.CompileOptions{Batch: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := program.Init(p, program.InitOptions{From: ""}); err != nil {
		t.Fatal(err)
	}
	params := program.Scope{}
	for _, name := range mem.Params() {
		params[name] = p.Scope[name]
	}
	loaded, err := data.LoadSplit(mem.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := loaded.Train
	whole := &trainer.Summary{}
	if whole.Loss, whole.Metrics, err = evaluateAll(mem, set, nil, params, evaluate.EvalChunk); err != nil {
		t.Fatal(err)
	}
	fs, err := data.OpenStream(stream.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	for _, chunk := range []int{40, 150, 1024} {
		got := &trainer.Summary{}
		if got.Loss, got.Metrics, err = evaluateAll(stream, nil, fs, params, chunk); err != nil {
			t.Fatal(err)
		}
		if math.Abs(got.Loss-whole.Loss) > 1e-5*whole.Loss || math.Abs(got.Metrics["acc"]-whole.Metrics["acc"]) > 1e-6 {
			t.Errorf("chunks of %d: loss %g acc %g, whole set loss %g acc %g", chunk, got.Loss, got.Metrics["acc"], whole.Loss, whole.Metrics["acc"])
		}
	}
}
