package job

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/evaluate"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/trainer"
)

// keysModel reads two categorical columns as 64-bit hashed keys and an
// integer column as int64 keys, joins them (reshape, concat, slice_rows),
// crosses all three into one 64-bit key and the last two into a table's
// int32 rows, and trains the table through the crossed rows.
const keysModel = `psgraph: 1
data:
  csv: d.tsv
  delimiter: tab
  label: {name: y, column: 0, dtype: float32}
  ids:
    - {name: cat, columns: [1, 3], key: hash64}
    - {name: uid, column: 3, key: int64}
  eval: {fraction: 0.25}
params:
  wide: {shape: [64, 1], init: {type: normal, std: 0.1, seed: 1}}
  bias: {shape: [1]}
ops:
  - {type: reshape, inputs: [uid], outputs: [u], attrs: {shape: [-1]}}
  - {type: concat, inputs: [cat, uid], outputs: [all], attrs: {axis: 1}}
  - {type: slice_rows, inputs: [all], outputs: [c2u], attrs: {start: 1, end: 3, axis: 1}}
  - {type: hash_cross, inputs: [all], outputs: [key], attrs: {dtype: int64, salt: 3}}
  - {type: hash_cross, inputs: [c2u], outputs: [bucket], attrs: {buckets: 64}}
  - {type: lookup_table, inputs: [wide, bucket], outputs: [w]}
  - {type: add, inputs: [w, bias], outputs: [logit]}
  - {type: sigmoid_cross_entropy, inputs: [logit, y], outputs: [loss]}
train: {loss: loss, batch: 8, steps: 6, optimizer: {type: sgd, lr: 0.5}}
`

// docKey is the documented key of a field (docs/dsl.md, "64-bit keys"),
// from hash/fnv.
func docKey(col int, field string) int64 {
	h := fnv.New64a()
	var c [4]byte
	binary.LittleEndian.PutUint32(c[:], uint32(col))
	h.Write(c[:])
	h.Write([]byte(field))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return keyOfHash(x)
}

func keyOfHash(x uint64) int64 {
	if x == 1<<63 {
		return math.MinInt64 + 1
	}
	return int64(x)
}

// docCross is hash_cross's documented hash (docs/dsl.md, "Feature
// crosses") of a row's values, before the bucket or key map.
func docCross(salt int64, vals ...int64) uint64 {
	mix := func(z uint64) uint64 {
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		return z ^ (z >> 31)
	}
	h := mix(uint64(salt) + 0x9e3779b97f4a7c15)
	for _, v := range vals {
		h = mix(h + 0x9e3779b97f4a7c15 + uint64(v))
	}
	return h
}

// 64-bit keys through a whole run: read from the file, rearranged and
// crossed in the graph, trained through a table and written by predict as
// integers, every value as the documented hashes give it; predict's prob
// is the sigmoid of the trained table's row of each crossed bucket (plus
// the bias), and
// the held-out loss their cross entropy over the held-out rows.
func TestKeysThroughTrainAndPredict(t *testing.T) {
	dir := t.TempDir()
	var file strings.Builder
	type row struct {
		a, b string
		u    int64
	}
	var rows []row
	for i := range 40 {
		r := row{fmt.Sprintf("%08x", i*2654435761%4093), fmt.Sprintf("c%d", i%5), int64(i-20) * 461168601842738790}
		if i == 7 {
			r.u = math.MaxInt64
		}
		rows = append(rows, r)
		fmt.Fprintf(&file, "%d\t%s\t%s\t%d\n", i%2, r.a, r.b, r.u)
	}
	if err := os.WriteFile(filepath.Join(dir, "d.tsv"), []byte(file.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(path, []byte(keysModel), 0o644); err != nil {
		t.Fatal(err)
	}
	g := load(t, path)
	save := filepath.Join(dir, "p.safetensors")
	sum, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Save: save, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Steps != 6 || math.IsNaN(sum.Loss) {
		t.Fatalf("training: %+v", sum)
	}
	params, _, err := modelfile.LoadSafetensors(save)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "pred.csv")
	res, err := evaluate.Predict(context.Background(), g, evaluate.PredictOptions{InitFrom: save, Data: filepath.Join(dir, "d.tsv"), Out: out,
		Outputs: []string{"key", "all", "u", "bucket", "prob"}, Chunk: 16, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if want := "key,all_0,all_1,all_2,u,bucket,prob"; lines[0] != want || res.Rows != len(rows) || len(lines) != len(rows)+1 {
		t.Fatalf("header %q, %d lines, %+v; want %q and %d rows", lines[0], len(lines), res, want, len(rows))
	}
	held, err := data.HeldOut(len(rows), 0.25, g.Data.Seed)
	if err != nil {
		t.Fatal(err)
	}
	var evalLoss float64
	nHeld := 0
	for i, r := range rows {
		f := strings.Split(lines[i+1], ",")
		ka, kb := docKey(1, r.a), docKey(2, r.b)
		bucket, _ := bits.Mul64(docCross(0, kb, r.u), 64)
		want := []string{
			strconv.FormatInt(keyOfHash(docCross(3, ka, kb, r.u)), 10),
			strconv.FormatInt(ka, 10), strconv.FormatInt(kb, 10), strconv.FormatInt(r.u, 10),
			strconv.FormatInt(r.u, 10), strconv.FormatUint(bucket, 10),
		}
		if strings.Join(f[:6], ",") != strings.Join(want, ",") {
			t.Fatalf("row %d: predict wrote %s, the documented hashes give %s", i, strings.Join(f[:6], ","), strings.Join(want, ","))
		}
		prob, _ := strconv.ParseFloat(f[6], 64)
		x := float64(params["wide"].F[bucket] + params["bias"].F[0])
		if w := 1 / (1 + math.Exp(-x)); math.Abs(prob-w) > 1e-6 {
			t.Errorf("row %d: prob %v, sigmoid of wide[%d] + bias %v", i, prob, bucket, w)
		}
		if held[i] {
			z := float64(i % 2)
			evalLoss += math.Max(x, 0) - x*z + math.Log1p(math.Exp(-math.Abs(x)))
			nHeld++
		}
	}
	// The held-out loss reads the held-out rows' keys through the same ops.
	if got, want := sum.Eval["eval_loss"], evalLoss/float64(nHeld); math.Abs(got-want) > 1e-5 {
		t.Errorf("eval_loss %v, by hand over the %d held-out rows %v", got, nHeld, want)
	}
}

// The keys model split over 2 trainers and 2 pservers (the table sharded,
// the keys read and crossed on each trainer) trains what one node with
// the doubled batch trains.
func TestKeysModelSplitEqualsLocalInmem(t *testing.T) {
	dir := t.TempDir()
	var file strings.Builder
	for i := range 64 {
		fmt.Fprintf(&file, "%d\t%x\tc%d\t%d\n", (i*7)%3%2, i*40503%1021, i%6, int64(i%9-4)*1152921504606846976)
	}
	if err := os.WriteFile(filepath.Join(dir, "d.tsv"), []byte(file.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(keysModel, "  eval: {fraction: 0.25}\n", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	g := load(t, path)
	local := filepath.Join(dir, "local.safetensors")
	if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 12, Batch: 16, Save: local, Log: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	dist := runTableJob(t, g, 2, 2, false, trainer.RunOptions{Steps: 12, Batch: 8, Log: zerolog.Nop()})
	compareParams(t, local, dist, 1e-5)
	a, _, _ := modelfile.LoadSafetensors(local)
	if w := a["wide"].F; slices.Equal(w, make([]float32, len(w))) {
		t.Fatal("the table did not train")
	}
}
