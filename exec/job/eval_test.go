package job

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/trainer"
	"github.com/psgraph/psgraph/internal/testfix"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/tensor"
)

// evaluateAll computes loss and metrics over the whole data set (set, or
// the streamed file) in chunks of chunk rows with the given parameter
// values: the loss, and the metrics by name.
func evaluateAll(g *dsl.Graph, set *data.Set, file *data.FileStream, params program.Scope, chunk int) (float64, map[string]float64, error) {
	ev, err := evaluate.NewEvaluator(g, set, file, params, chunk)
	if err != nil {
		return 0, nil, err
	}
	defer ev.Close()
	vals, err := ev.Run(context.Background())
	if err != nil {
		return 0, nil, err
	}
	metrics := map[string]float64{}
	for i, m := range g.Train.Metrics {
		metrics[m] = vals[i+1]
	}
	return vals[0], metrics, nil
}

// meanStd is the per-column mean and population standard deviation of
// the rows keep selects (a std of 0 counts as 1), computed by hand.
func meanStd(xs [][]float64, keep func(int) bool) (mean, std []float64) {
	nf := len(xs[0])
	mean, std = make([]float64, nf), make([]float64, nf)
	n := 0
	for i, x := range xs {
		if !keep(i) {
			continue
		}
		n++
		for j, v := range x {
			mean[j] += v
		}
	}
	for j := range mean {
		mean[j] /= float64(n)
	}
	for i, x := range xs {
		if !keep(i) {
			continue
		}
		for j, v := range x {
			std[j] += (v - mean[j]) * (v - mean[j])
		}
	}
	for j := range std {
		std[j] = math.Sqrt(std[j] / float64(n))
		if std[j] < 1e-12 {
			std[j] = 1
		}
	}
	return mean, std
}

// mlpLossAcc is the digits MLP's mean cross entropy and accuracy over the
// rows keep selects, in float64 from the saved parameters, with features
// normalized by mean and std.
func mlpLossAcc(p map[string]*tensor.Tensor, xs [][]float64, ys []int, keep func(int) bool, mean, std []float64) (float64, float64, int) {
	W1, b1, W2, b2 := p["W1"].F, p["b1"].F, p["W2"].F, p["b2"].F
	hidden, classes := len(b1), len(b2)
	var loss float64
	right, n := 0, 0
	h := make([]float64, hidden)
	z := make([]float64, classes)
	for i, x := range xs {
		if !keep(i) {
			continue
		}
		n++
		for k := range h {
			h[k] = float64(b1[k])
		}
		for j, v := range x {
			xn := float64(float32((v - mean[j]) / std[j]))
			for k := range h {
				h[k] += xn * float64(W1[j*hidden+k])
			}
		}
		for c := range z {
			z[c] = float64(b2[c])
			for k, hv := range h {
				z[c] += math.Max(hv, 0) * float64(W2[k*classes+c])
			}
		}
		m, best := z[0], 0
		for c, v := range z {
			if v > m {
				m, best = v, c
			}
		}
		var s float64
		for _, v := range z {
			s += math.Exp(v - m)
		}
		loss += -(z[ys[i]] - m - math.Log(s))
		if best == ys[i] {
			right++
		}
	}
	return loss / float64(n), float64(right) / float64(n), n
}

// The held-out fifth of the digits (data.eval: {fraction: 0.2}) is
// evaluated with the mean and std of the other four fifths: the saved
// statistics and the summary's eval_loss and eval_acc equal a hand
// computation from the CSV and the saved parameters, and differ from the
// same computation with the statistics of all rows.
func TestHeldOutUsesTrainingStatistics(t *testing.T) {
	save := filepath.Join(t.TempDir(), "digits.safetensors")
	g := load(t, "../../testdata/eval/digits-heldout.yaml")
	sum, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 150, Save: save, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	params, meta, err := modelfile.LoadSafetensors(save)
	if err != nil {
		t.Fatal(err)
	}
	xs, ys := testfix.Digits(t)
	held, err := data.HeldOut(len(xs), 0.2, 1)
	if err != nil {
		t.Fatal(err)
	}
	nheld := 0
	for _, h := range held {
		if h {
			nheld++
		}
	}
	if want := int(math.Round(0.2 * float64(len(xs)))); nheld != want || sum.EvalRows != want {
		t.Fatalf("held out %d rows, the summary says %d; want round(0.2 x %d) = %d", nheld, sum.EvalRows, len(xs), want)
	}
	isHeld := func(i int) bool { return held[i] }
	isTrain := func(i int) bool { return !held[i] }
	mean, std := meanStd(xs, isTrain)
	var shift, scale []float64
	if json.Unmarshal([]byte(meta["normalize_shift"]), &shift) != nil || json.Unmarshal([]byte(meta["normalize_scale"]), &scale) != nil || meta["normalize"] != "standard" {
		t.Fatalf("metadata %v lacks the normalization statistics", meta)
	}
	for j := range mean {
		if math.Abs(shift[j]-mean[j]) > 1e-9*math.Max(1, math.Abs(mean[j])) || math.Abs(scale[j]-std[j]) > 1e-9*math.Max(1, std[j]) {
			t.Fatalf("column %d: saved mean %v std %v, the training rows' by hand %v %v", j, shift[j], scale[j], mean[j], std[j])
		}
	}
	loss, acc, n := mlpLossAcc(params, xs, ys, isHeld, mean, std)
	gotLoss, gotAcc := sum.Eval["eval_loss"], sum.Eval["eval_acc"]
	if math.Abs(gotLoss-loss) > 1e-4*loss || math.Abs(gotAcc-acc) > 1.01/float64(n) {
		t.Fatalf("eval_loss %v eval_acc %v; by hand with the training statistics %v %v", gotLoss, gotAcc, loss, acc)
	}
	allMean, allStd := meanStd(xs, func(int) bool { return true })
	if other, _, _ := mlpLossAcc(params, xs, ys, isHeld, allMean, allStd); math.Abs(other-loss) < 10*1e-4*loss {
		t.Fatalf("with the statistics of all rows the loss is %v, too close to %v for the test to tell them apart", other, loss)
	}
	// psgraph eval's computation: the same numbers from the file alone.
	res, err := evaluate.EvalModel(context.Background(), g, evaluate.EvalOptions{InitFrom: save, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Data != "held-out" || res.Rows != nheld || res.Loss != gotLoss || res.Metrics["acc"] != gotAcc {
		t.Fatalf("EvalModel: %+v; the run's summary: rows %d loss %v acc %v", res, nheld, gotLoss, gotAcc)
	}
}

// The held-out rows depend only on the row count, fraction and seed.
func TestHeldOutIsDeterministicBySeed(t *testing.T) {
	a, _ := data.HeldOut(1000, 0.1, 7)
	b, _ := data.HeldOut(1000, 0.1, 7)
	c, _ := data.HeldOut(1000, 0.1, 8)
	same, other, n := true, false, 0
	for i := range a {
		same = same && a[i] == b[i]
		other = other || a[i] != c[i]
		if a[i] {
			n++
		}
	}
	if !same || !other || n != 100 {
		t.Fatalf("same seed same rows %v, another seed other rows %v, %d rows held out of 1000 at 0.1", same, other, n)
	}
	if _, err := data.HeldOut(1, 0.5, 1); err == nil {
		t.Fatal("holding out a row of a 1-row data set succeeded")
	}
}

// train.eval_every: the --metrics file has eval_loss and eval_acc at every
// 100th step and the last, the last equal to the summary's; evaluating
// the held-out set allocates nothing after setup.
func TestEvalEveryWritesMetrics(t *testing.T) {
	dir := t.TempDir()
	metrics := filepath.Join(dir, "run.jsonl")
	g := load(t, "../../testdata/eval/digits-heldout.yaml")
	sum, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 250, Metrics: metrics, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	var steps []int
	var last map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m["eval_loss"]; ok {
			steps = append(steps, int(m["step"].(float64)))
			last = m
		}
	}
	if len(steps) != 3 || steps[0] != 100 || steps[1] != 200 || steps[2] != 250 {
		t.Fatalf("eval lines at steps %v, want [100 200 250]", steps)
	}
	js, _ := json.Marshal(sum)
	var s map[string]any
	json.Unmarshal(js, &s)
	if s["eval_acc"] != last["eval_acc"] || s["eval_loss"] != last["eval_loss"] || s["eval_rows"] != 359.0 {
		t.Fatalf("summary %s; last eval line %v", js, last)
	}

	sp, err := data.LoadSplit(g.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := program.Compile(g, program.CompileOptions{Batch: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	if err := program.Init(prog, program.InitOptions{From: ""}); err != nil {
		t.Fatal(err)
	}
	shared := program.Scope{}
	for _, p := range g.Params() {
		shared[p] = prog.Scope[p]
	}
	ev, err := evaluate.NewEvaluator(g, sp.Eval, nil, shared, evaluate.EvalChunk)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	if a := testing.AllocsPerRun(5, func() {
		if _, err := ev.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Fatalf("%.1f allocations per held-out evaluation, want 0", a)
	}
}

// A streamed training file with a held-out file (data.eval: {csv}): the
// held-out rows are normalized with the training file's mean and std, and
// eval_loss and eval_acc equal a hand computation; the same files loaded
// into memory give the same numbers.
func TestHeldOutFileUsesTrainingStatistics(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile("../../examples/data/digits.csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSpace(string(src)), "\n")
	const cut = 1400
	if err := os.WriteFile(filepath.Join(dir, "train.csv"), []byte(strings.Join(lines[:cut], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "held.csv"), []byte(strings.Join(lines[cut:], "")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	model, err := os.ReadFile("../../examples/digits-mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	xs, ys := testfix.Digits(t)
	mean, std := meanStd(xs, func(i int) bool { return i < cut })
	isHeld := func(i int) bool { return i >= cut }
	var evals [2]map[string]float64
	for k, stream := range []string{"true", "false"} {
		y := strings.Replace(string(model), "csv: data/digits.csv", "csv: train.csv\n  eval: {csv: held.csv}", 1)
		y = strings.Replace(y, "shuffle: false", "shuffle: false\n  stream: "+stream, 1)
		y = strings.Replace(y, "steps: 1000", "steps: 1000\n  eval_every: 50", 1)
		path := filepath.Join(dir, "model-"+stream+".yaml")
		if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		save := filepath.Join(dir, "params-"+stream+".safetensors")
		sum, err := trainer.Train(context.Background(), load(t, path), trainer.RunOptions{Role: "local", Steps: 120, Save: save, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		params, _, err := modelfile.LoadSafetensors(save)
		if err != nil {
			t.Fatal(err)
		}
		loss, acc, n := mlpLossAcc(params, xs, ys, isHeld, mean, std)
		if sum.EvalRows != n || math.Abs(sum.Eval["eval_loss"]-loss) > 1e-4*loss || math.Abs(sum.Eval["eval_acc"]-acc) > 1.01/float64(n) {
			t.Fatalf("stream: %s: %d rows, eval_loss %v eval_acc %v; by hand with the training file's statistics: %d rows, %v %v", stream, sum.EvalRows, sum.Eval["eval_loss"], sum.Eval["eval_acc"], n, loss, acc)
		}
		evals[k] = sum.Eval
		// psgraph eval --data of all 1797 rows: chunks of 1024 and 773
		// when streamed.
		res, err := evaluate.EvalModel(context.Background(), load(t, path), evaluate.EvalOptions{InitFrom: save, Data: "../../examples/data/digits.csv", Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		all := func(int) bool { return true }
		loss, acc, n = mlpLossAcc(params, xs, ys, all, mean, std)
		if res.Rows != n || math.Abs(res.Loss-loss) > 1e-4*loss || math.Abs(res.Metrics["acc"]-acc) > 1.01/float64(n) {
			t.Fatalf("stream: %s: eval --data of every row: %+v; by hand %d rows, %v %v", stream, res, n, loss, acc)
		}
	}
	if math.Abs(evals[0]["eval_loss"]-evals[1]["eval_loss"]) > 1e-6 || evals[0]["eval_acc"] != evals[1]["eval_acc"] {
		t.Fatalf("streamed %v, in memory %v", evals[0], evals[1])
	}
}
