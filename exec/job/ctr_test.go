package job

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/trainer"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/data/criteo"
)

// ctrModel is a small click-through model on the Criteo format: hashed
// categorical ids through an embedding, log-transformed integer features.
const ctrModel = `psgraph: 1
name: ctr
data:
  csv: train.tsv
  delimiter: tab
  label: {name: y, column: 0}
  features: {name: dense, columns: [1, 14], fill: 0, transform: log}
  ids: {name: cat, columns: [14, 40], hash_buckets: 500}
  normalize: standard
params:
  emb: {shape: [500, 4], init: {type: normal, std: 0.1, seed: 1}}
  We: {shape: [104, 2], init: {type: xavier_uniform, seed: 2}}
  Wd: {shape: [13, 2], init: {type: xavier_uniform, seed: 3}}
  b: {shape: [2]}
ops:
  - {type: lookup_table, inputs: [emb, cat], outputs: [e3]}
  - {type: reshape, inputs: [e3], outputs: [e], attrs: {shape: [-1, 104]}}
  - {type: matmul, inputs: [e, We], outputs: [ze]}
  - {type: matmul, inputs: [dense, Wd], outputs: [zd]}
  - {type: add, inputs: [ze, zd], outputs: [z]}
  - {type: add, inputs: [z, b], outputs: [logits]}
  - {type: softmax_cross_entropy, inputs: [logits, y], outputs: [loss]}
  - {type: accuracy, inputs: [logits, y], outputs: [acc]}
train:
  loss: loss
  metrics: [acc]
  batch: 16
  steps: 40
  optimizer: {type: adagrad, lr: 0.1}
`

// ctrGraphs writes a generated Criteo file of rows rows and loads the CTR
// model on it twice: in memory and streamed.
func ctrGraphs(t *testing.T, rows int64) (mem, stream *dsl.Graph) {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "train.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	if err := criteo.Write(f, criteo.Options{Rows: rows, Seed: 2, Vocab: 100}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for i, src := range []string{ctrModel, strings.Replace(ctrModel, "  normalize: standard\n", "  normalize: standard\n  stream: true\n", 1)} {
		path := filepath.Join(dir, []string{"mem.yaml", "stream.yaml"}[i])
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		g := load(t, path)
		if i == 0 {
			mem = g
		} else {
			stream = g
		}
	}
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
	if err := program.InitPersistent(p, ""); err != nil {
		t.Fatal(err)
	}
	params := program.Scope{}
	for _, name := range mem.Params() {
		params[name] = p.Scope[name]
	}
	set, err := data.Load(mem.Data)
	if err != nil {
		t.Fatal(err)
	}
	whole := &trainer.Summary{}
	if whole.Loss, whole.Metrics, err = evaluate.Evaluate(mem, set, params); err != nil {
		t.Fatal(err)
	}
	fs, err := data.OpenStream(stream.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	for _, chunk := range []int{40, 150, 1024} {
		got := &trainer.Summary{}
		if got.Loss, got.Metrics, err = evaluate.EvaluateStream(stream, fs, params, chunk); err != nil {
			t.Fatal(err)
		}
		if math.Abs(got.Loss-whole.Loss) > 1e-5*whole.Loss || math.Abs(got.Metrics["acc"]-whole.Metrics["acc"]) > 1e-6 {
			t.Errorf("chunks of %d: loss %g acc %g, whole set loss %g acc %g", chunk, got.Loss, got.Metrics["acc"], whole.Loss, whole.Metrics["acc"])
		}
	}
}
