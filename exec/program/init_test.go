package program

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/progress"
	"github.com/psgraph/psgraph/exec/tensor"
)

// A table's initial values do not depend on how many cores draw them:
// drawn on 1, 2, 3 or 8 workers (chunks of rows taken in turn), every
// row equals the row drawn alone from its own stream, seeded by (seed,
// row), as the sequential loop drew it before (the reference below), for
// a whole table and for a shard of it; zeros and constants fill too.
func TestInitializeSameOnAnyCores(t *testing.T) {
	const rows, width = 70001, 16 // chunks of initChunk/16 rows, a short last one
	cases := []*dsl.Init{
		{Type: "normal", Attrs: map[string]any{"std": 0.01, "mean": 0.5, "seed": 7}},
		{Type: "uniform", Attrs: map[string]any{"min": -1.0, "max": 2.0, "seed": 3}},
		{Type: "xavier_uniform", Attrs: map[string]any{"seed": 4}},
		{Type: "he_normal", Attrs: map[string]any{"seed": 5}},
	}
	full := tensor.Shape{rows, width}
	for _, in := range cases {
		for _, shard := range [][2]int{{0, 1}, {2, 3}} { // the whole table; rows 2, 5, 8, ...
			n := (rows - shard[0] + shard[1] - 1) / shard[1]
			want := reference(in, full, n, width, shard[0], shard[1])
			for _, workers := range []int{1, 2, 3, 8} {
				got := tensor.New(tensor.F32, tensor.Shape{n, width})
				if err := initialize(got, in, "emb", full, shard[0], shard[1], workers, nil); err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if got.F[i] != want[i] {
						t.Fatalf("%s, rows %d mod %d, %d workers: value %d (row %d) = %v, want %v", in.Type, shard[0], shard[1], workers, i, i/width, got.F[i], want[i])
					}
				}
			}
		}
	}
	for _, in := range []*dsl.Init{{Type: "zeros"}, {Type: "constant", Attrs: map[string]any{"value": 0.25}}} {
		got := tensor.New(tensor.F32, full)
		for i := range got.F {
			got.F[i] = float32(i % 7) // not zero: the zeros initializer must clear it
		}
		if err := initialize(got, in, "acc", nil, 0, 1, 2, nil); err != nil {
			t.Fatal(err)
		}
		v := float32(in.Attrs.Float("value"))
		for i, x := range got.F {
			if x != v {
				t.Fatalf("%s: value %d = %v, want %v", in.Type, i, x, v)
			}
		}
	}
}

// reference draws rows start, start+step, ... of a parameter of shape
// full one at a time, each from the PCG stream (seed, rowStream(row)).
func reference(in *dsl.Init, full tensor.Shape, n, width, start, step int) []float32 {
	seed := uint64(in.Attrs.Int("seed"))
	fanIn, fanOut := fans(full)
	out := make([]float32, n*width)
	pcg := rand.NewPCG(0, 0)
	r := rand.New(pcg)
	for i := range n {
		pcg.Seed(seed, rowStream(uint64(start+i*step)))
		for j := range width {
			var v float64
			switch in.Type {
			case "normal":
				v = in.Attrs.Float("mean") + in.Attrs.Float("std")*r.NormFloat64()
			case "uniform":
				lo, hi := in.Attrs.Float("min"), in.Attrs.Float("max")
				v = lo + (hi-lo)*r.Float64()
			case "xavier_uniform":
				v = math.Sqrt(6/float64(fanIn+fanOut)) * (2*r.Float64() - 1)
			case "he_normal":
				v = math.Sqrt(2/float64(fanIn)) * r.NormFloat64()
			}
			out[i*width+j] = float32(v)
		}
	}
	return out
}

// Drawing a table's values is a long phase: with a clock that passes a
// second between two counts, Init logs its progress (values drawn of the
// total, rate, time left) and its end.
func TestInitReportsProgress(t *testing.T) {
	p := bigModel(t, 200000, "sgd")
	var b bytes.Buffer
	clock := time.Unix(0, 0)
	rep := &progress.Reporter{Log: zerolog.New(&b), Now: func() time.Time { clock = clock.Add(time.Second); return clock }}
	if err := Init(p, InitOptions{Progress: rep}); err != nil {
		t.Fatal(err)
	}
	log := b.String()
	total := 200000 * 16
	if n := strings.Count(log, `"message":"initializing the parameters"`); n < 200000*16/initChunk {
		t.Errorf("%d progress lines for %d chunks of values, want one per chunk:\n%s", n, 200000*16/initChunk, log)
	}
	if !strings.Contains(log, `"of":"`+strconv.Itoa(total)+` values"`) || !strings.Contains(log, `"eta":`) || !strings.Contains(log, `"message":"initializing the parameters: done"`) {
		t.Errorf("progress lines lack the total %d, the time left or the end:\n%s", total, log)
	}
}

// bigModel compiles a model of one parameter W of 16 x cols values (drawn
// from a normal distribution) under the optimizer, batch 4; the program
// is closed at the end of the test.
func bigModel(t *testing.T, cols int, optimizer string) *Program {
	g, err := dsl.LoadBytes("big.yaml", []byte(fmt.Sprintf(`psgraph: 1
name: big
data: {synthetic: {rows: 8, features: 16, classes: 2}, features: {name: x}, label: {name: y}}
params:
  W: {shape: [16, %d], init: {type: normal, std: 0.01, seed: 1}}
ops:
  - {type: matmul, inputs: [x, W], outputs: [z]}
  - {type: softmax_cross_entropy, inputs: [z, y], outputs: [loss]}
train: {loss: loss, batch: 4, steps: 1, optimizer: {type: %s, lr: 0.1}}
`, cols, optimizer)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(g, CompileOptions{Batch: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
