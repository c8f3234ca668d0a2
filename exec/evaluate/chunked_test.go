package evaluate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/data/criteo"
	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/trainer"
	"github.com/psgraph/psgraph/internal/testfix"
)

// ctrAUCModel is testfix.CTRModel with a hidden layer of width 256 and auc among
// its metrics.
var ctrAUCModel = strings.NewReplacer(
	"  We: {shape: [104, 2], init: {type: xavier_uniform, seed: 2}}\n",
	"  We: {shape: [104, 256], init: {type: he_normal, seed: 2}}\n  Wh: {shape: [256, 2], init: {type: xavier_uniform, seed: 4}}\n",
	"  - {type: matmul, inputs: [e, We], outputs: [ze]}\n",
	"  - {type: matmul, inputs: [e, We], outputs: [he]}\n  - {type: relu, inputs: [he], outputs: [hr]}\n  - {type: matmul, inputs: [hr, Wh], outputs: [ze]}\n",
	"  metrics: [acc]\n", "  metrics: [acc, auc]\n",
	"  - {type: accuracy, inputs: [logits, y], outputs: [acc]}\n",
	"  - {type: accuracy, inputs: [logits, y], outputs: [acc]}\n  - {type: auc, inputs: [logits, y], outputs: [auc]}\n",
).Replace(testfix.CTRModel(500, 16, 40, false))

// ctrAUCGraph writes a generated Criteo file of rows rows beside the model
// (streamed or not) and loads it.
func ctrAUCGraph(t *testing.T, rows int64, stream bool) *dsl.Graph {
	t.Helper()
	var tsv bytes.Buffer
	if _, err := criteo.Generate(&tsv, criteo.Options{Rows: rows, Seed: 2, Vocab: 100}); err != nil {
		t.Fatal(err)
	}
	src := ctrAUCModel
	if stream {
		src = strings.Replace(src, "  normalize: standard\n", "  normalize: standard\n  stream: true\n", 1)
	}
	return testfix.ModelWith(t, src, map[string][]byte{"train.tsv": tsv.Bytes()})
}

// initialParams compiles g and returns its initial parameters.
func initialParams(t *testing.T, g *dsl.Graph) program.Scope {
	t.Helper()
	p, err := program.Compile(g, program.CompileOptions{Batch: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := program.Init(p, program.InitOptions{From: ""}); err != nil {
		t.Fatal(err)
	}
	params := program.Scope{}
	for _, name := range g.Params() {
		params[name] = p.Scope[name]
	}
	return params
}

// pairAUC is the AUC of scores by its definition: the share of (positive,
// negative) pairs in which the positive scores higher, ties counting 1/2.
func pairAUC(s []float64, y []int32) float64 {
	var num, pairs float64
	for i := range s {
		for j := range s {
			if y[i] == 1 && y[j] == 0 {
				pairs++
				switch {
				case s[i] > s[j]:
					num++
				case s[i] == s[j]:
					num += 0.5
				}
			}
		}
	}
	return num / pairs
}

// An evaluation in chunks gives the AUC of the whole set, not a mean of
// the chunks' AUCs: over 1,000 rows in memory and streamed, in chunks of
// 64, 300 and 1,024 rows, auc equals the AUC of every (positive,
// negative) pair of the rows' scores, computed here from the logits of one
// batch of all the rows; the row-weighted mean of the 64-row chunks' AUCs,
// what a streamed evaluation reported before, is off by more than 1e-3.
func TestChunkedAUCIsExact(t *testing.T) {
	const rows = 1000
	g := ctrAUCGraph(t, rows, false)
	params := initialParams(t, g)
	loaded, err := data.LoadSplit(g.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := loaded.Train
	// The scores: log(p1/p0) of one batch of every row.
	one, err := program.Compile(g, program.CompileOptions{Batch: rows, Targets: []string{"logits"}, Shared: params, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if err := program.NewFeeder(g, one.Scope).Fill(data.NewOrderedStream(set), 0); err != nil {
		t.Fatal(err)
	}
	if err := one.Run(&program.Runtime{Ctx: context.Background()}); err != nil {
		t.Fatal(err)
	}
	lg := one.Scope["logits"].F
	scores := make([]float64, rows)
	for i := range scores {
		scores[i] = float64(lg[2*i+1] - lg[2*i])
	}
	want := pairAUC(scores, set.Labels)
	var chunked float64
	for lo := 0; lo < rows; lo += 64 {
		hi := min(lo+64, rows)
		chunked += float64(hi-lo) * pairAUC(scores[lo:hi], set.Labels[lo:hi])
	}
	if chunked /= rows; math.Abs(chunked-want) < 1e-3 {
		t.Fatalf("the mean of the chunks' AUCs %.5f is within 1e-3 of the exact %.5f: the data does not tell them apart", chunked, want)
	}
	stream := ctrAUCGraph(t, rows, true)
	fs, err := data.OpenStream(stream.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	for _, chunk := range []int{64, 300, 1024} {
		for _, streamed := range []bool{false, true} {
			var ev *evaluate.Evaluator
			if streamed {
				ev, err = evaluate.NewEvaluator(stream, nil, fs, params, chunk)
			} else {
				ev, err = evaluate.NewEvaluator(g, set, nil, params, chunk)
			}
			if err != nil {
				t.Fatal(err)
			}
			vals, err := ev.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := vals[2]; math.Abs(got-want) > 1e-9 || ev.Rows != rows {
				t.Errorf("chunks of %d (streamed %v): auc %.9f over %d rows, want %.9f over %d (mean of chunk AUCs: %.5f)", chunk, streamed, got, ev.Rows, want, rows, chunked)
			}
			ev.Close()
		}
	}
}

// An evaluation of a set in memory runs in chunks, so what it allocates
// does not grow with the set: over 4,000 and 32,000 rows in chunks of
// 1,024 it allocates about the same (the AUC's 8 bytes per row aside),
// and one batch of all 32,000 rows, how a set in memory was evaluated
// before, allocates over 8 times as much.
func TestEvalMemoryIsChunked(t *testing.T) {
	alloc := func(g *dsl.Graph, set *data.Set, chunk int) uint64 {
		params := initialParams(t, g)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ev, err := evaluate.NewEvaluator(g, set, nil, params, chunk)
		if err != nil {
			t.Fatal(err)
		}
		defer ev.Close()
		if _, err := ev.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	var small, large, whole uint64
	for _, rows := range []int{4000, 32000} {
		g := ctrAUCGraph(t, int64(rows), false)
		loaded, err := data.LoadSplit(g.Data, nil)
		if err != nil {
			t.Fatal(err)
		}
		set := loaded.Train
		got := alloc(g, set, evaluate.EvalChunk)
		if rows == 4000 {
			small = got
		} else {
			large, whole = got, alloc(g, set, rows)
		}
	}
	t.Logf("allocated: 4,000 rows %d KiB, 32,000 rows %d KiB in chunks, %d KiB in one batch", small>>10, large>>10, whole>>10)
	if large > small+small/4+28000*8 {
		t.Errorf("in chunks, 32,000 rows allocate %d bytes against %d for 4,000: the evaluation grows with the set", large, small)
	}
	if whole < 8*large {
		t.Errorf("one batch of 32,000 rows allocates %d bytes, chunks %d: expected over 8x", whole, large)
	}
}

// A regression's rmse and mae over an evaluation are those of all its
// rows, computed here from the CSV and the parameters (W = [1, -1, 0.5],
// b = 0.25), whatever the chunks: mae a row-weighted mean of the chunks',
// rmse the root of the row-weighted mean of their squares (not a mean of
// chunk roots, which the last check tells apart).
func TestChunkedRegressionMetricsAreExact(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(testfix.Path("testdata/regression/linear.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "linear.csv"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	model, err := os.ReadFile(testfix.Path("testdata/regression/linear.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := strings.NewReplacer("  - {type: mse, inputs: [pred, y], outputs: [loss]}\n",
		"  - {type: mse, inputs: [pred, y], outputs: [loss]}\n  - {type: rmse, inputs: [pred, y], outputs: [rmse]}\n  - {type: mae, inputs: [pred, y], outputs: [mae]}\n",
		"  loss: loss\n", "  loss: loss\n  metrics: [rmse, mae]\n").Replace(string(model))
	path := filepath.Join(dir, "linear.yaml")
	if err := os.WriteFile(path, []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := dsl.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	params := initialParams(t, g)
	copy(params["W"].F, []float32{1, -1, 0.5})
	params["b"].F[0] = 0.25
	lines := strings.Split(strings.TrimSpace(string(src)), "\n")[1:]
	var sq, abs float64
	var sqs []float64
	for _, l := range lines {
		var x [4]float64
		for j, f := range strings.Split(l, ",") {
			x[j] = must(strconv.ParseFloat(f, 64))
		}
		d := x[0] - x[1] + 0.5*x[2] + 0.25 - x[3]
		sq, abs = sq+d*d, abs+math.Abs(d)
		sqs = append(sqs, d*d)
	}
	n := float64(len(lines))
	wantRMSE, wantMAE := math.Sqrt(sq/n), abs/n
	var meanOfRoots float64 // chunks of 64
	for lo := 0; lo < len(sqs); lo += 64 {
		hi := min(lo+64, len(sqs))
		var s float64
		for _, v := range sqs[lo:hi] {
			s += v
		}
		meanOfRoots += float64(hi-lo) * math.Sqrt(s/float64(hi-lo))
	}
	if meanOfRoots /= n; math.Abs(meanOfRoots-wantRMSE) < 1e-4 {
		t.Fatalf("the mean of chunk RMSEs %.6f is within 1e-4 of the exact %.6f: the data does not tell them apart", meanOfRoots, wantRMSE)
	}
	loaded, err := data.LoadSplit(g.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := loaded.Train
	for _, chunk := range []int{64, 240} {
		ev, err := evaluate.NewEvaluator(g, set, nil, params, chunk)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := ev.Run(context.Background())
		ev.Close()
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(vals[1]-wantRMSE) > 1e-5*wantRMSE || math.Abs(vals[2]-wantMAE) > 1e-5*wantMAE {
			t.Errorf("chunks of %d: rmse %.6f mae %.6f, want %.6f and %.6f", chunk, vals[1], vals[2], wantRMSE, wantMAE)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The summary of a run without a final pass has the auc of its last 100
// steps' rows at once, not a mean of batch AUCs: batches of 4 rows, many
// of one class (a NaN AUC, null in the metrics file), give a summary auc
// that is a number.
func TestTailSummaryAUCSurvivesOneClassBatches(t *testing.T) {
	g := ctrAUCGraph(t, 1000, false)
	g.Train.Batch = 4
	metrics := filepath.Join(t.TempDir(), "m.jsonl")
	sum, err := trainer.Train(context.Background(), g, trainer.RunOptions{
		Role: "local", Steps: 150, LogEvery: 1, Metrics: metrics, Log: zerolog.Nop(), FinalPass: trainer.FinalPassOff,
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	nulls := 0
	for _, l := range lines[len(lines)-100:] {
		var m struct{ AUC *float64 }
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m.AUC == nil {
			nulls++
		}
	}
	if nulls == 0 {
		t.Fatal("no batch of the last 100 steps has one class: the data does not stress the claim")
	}
	if auc := sum.Metrics["auc"]; math.IsNaN(auc) || auc <= 0 || auc >= 1 {
		t.Errorf("summary auc %v with %d one-class batches in the last 100 steps, want the AUC of their rows", auc, nulls)
	}
}
