package serve

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
)

// tinyModel reads two features and one id, looks the id's row up in a
// table emb [8, 4] and adds x·W: requests asking for e (the row) and h
// (x·W) see the table and the dense parameter as they are.
const tinyModel = `psgraph: 1
name: tiny
data:
  csv: tiny.csv
  features: {name: x, columns: [0, 2]}
  ids: {name: id, columns: [2, 3], num_ids: 8}
  label: {name: y, column: 3}
params:
  emb: {shape: [8, 4]}
  W: {shape: [2, 4]}
ops:
  - {type: lookup_table, inputs: [emb, id], outputs: [e3]}
  - {type: reshape, inputs: [e3], outputs: [e], attrs: {shape: [-1, 4]}}
  - {type: matmul, inputs: [x, W], outputs: [h]}
  - {type: add, inputs: [e, h], outputs: [logits]}
  - {type: softmax_cross_entropy, inputs: [logits, y], outputs: [loss]}
train: {loss: loss, batch: 4, optimizer: {type: sgd, lr: 0.1}}
`

func tiny(t *testing.T) *dsl.Graph {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tiny.csv"), []byte("1,0,3,0\n0,1,5,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(path, []byte(tinyModel), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := dsl.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// filled is a tensor of shape with every value v.
func filled(shape tensor.Shape, v float32) *tensor.Tensor {
	t := tensor.New(tensor.F32, shape)
	for i := range t.F {
		t.F[i] = v
	}
	return t
}

// Updates of a followed job are applied while requests run: a request
// computes with one version of the dense parameters, the one its
// model_version names (h = x·W holds that version's W), and reads every
// table row whole, never older than that version (the rows are written
// before the dense swap): 4 goroutines infer while 100 updates write W
// and every row of emb with the step's number.
func TestUpdatesUnderLoadAreConsistent(t *testing.T) {
	g := tiny(t)
	m, err := NewModel(g, Params{Tensors: map[string]*tensor.Tensor{"emb": filled(tensor.Shape{8, 4}, 0), "W": filled(tensor.Shape{2, 4}, 0)}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	req, err := DecodeRequest([]byte(`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[3],"data":["1,0,3","1,0,5,1","1,0,0"]}],"outputs":[{"name":"e"},{"name":"h"}]}`), m.Meta())
	if err != nil {
		t.Fatal(err)
	}
	const steps = 100
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var answered atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if recover() != nil {
					failed.Store(true)
				}
			}()
			res := new(Result)
			for n := 0; ; n++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				err := m.Infer(context.Background(), req, res)
				if err != nil {
					failed.Store(true)
					errs <- err
					return
				}
				answered.Add(1)
				v := float32(res.Version)
				e, h := res.Outputs[0].Floats, res.Outputs[1].Floats
				for i, x := range h {
					if x != v {
						failed.Store(true)
						errs <- fmt.Errorf("version %d: h[%d] = %v, want W of that version, %v", res.Version, i, x, v)
						return
					}
				}
				for r := 0; r < 3; r++ {
					row := e[r*4 : r*4+4]
					for _, x := range row {
						if x != row[0] || x < v {
							failed.Store(true)
							errs <- fmt.Errorf("version %d: row %d reads %v: torn, or older than the version", res.Version, r, row)
							return
						}
					}
				}
			}
		}()
	}
	for step := int64(1); step <= steps; step++ {
		// requests run between every two updates
		for n, deadline := answered.Load(), time.Now().Add(10*time.Second); answered.Load() < n+2 && !failed.Load() && time.Now().Before(deadline); {
			runtime.Gosched()
		}
		// every row written many times over, in several holds of the rows
		// lock (rowsPerHold)
		ids := make([]int64, 4*rowsPerHold)
		for i := range ids {
			ids[i] = int64(7 - i%8)
		}
		u := Update{Step: step,
			Dense: []DenseValues{{Name: "W", Offset: 0, Values: filled(tensor.Shape{4}, float32(step)).F}, {Name: "W", Offset: 4, Values: filled(tensor.Shape{4}, float32(step)).F}},
			Rows:  []TableRows{{Name: "emb", IDs: ids, Values: filled(tensor.Shape{4 * len(ids)}, float32(step)).F}}}
		if err := m.Apply(u); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if m.Version() != steps {
		t.Errorf("version %d after %d updates", m.Version(), steps)
	}
	for _, bad := range []Update{
		{Step: 1, Dense: []DenseValues{{Name: "W", Offset: 6, Values: make([]float32, 4)}}},
		{Step: 1, Dense: []DenseValues{{Name: "emb", Values: make([]float32, 4)}}},
		{Step: 1, Rows: []TableRows{{Name: "emb", IDs: []int64{8}, Values: make([]float32, 4)}}},
		{Step: 1, Rows: []TableRows{{Name: "W", IDs: []int64{0}, Values: make([]float32, 4)}}},
	} {
		if err := m.Apply(bad); err == nil {
			t.Errorf("applied %+v, which does not fit the model", bad)
		}
	}
}

// A dynamic table's rows arrive by key, each with its meta, into a
// mirror of the job's shards: an update creates the rows of new keys and
// overwrites known ones; a shard's watermark kills its rows scored under
// it (key 5 reads the default again, as a key the table never held does,
// and key 6 of the other shard stays); a whole shard's state forgets the
// rows the model held of it.
func TestUpdatesWriteDynamicTableRowsByKey(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tiny.csv"), []byte("1,0,3,0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := strings.NewReplacer("ids: {name: id, columns: [2, 3], num_ids: 8}", "ids: {name: id, columns: [2, 3], key: int64}",
		"emb: {shape: [8, 4]}", "emb: {dynamic: {dim: 4, ttl_steps: 10}, init: {type: zeros}}").Replace(tinyModel)
	path := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := dsl.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, lowered, err := dsl.LowerDynamic(g)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := program.TableConfig(lowered[0])
	if err != nil {
		t.Fatal(err)
	}
	const shards = 2
	if dyntable.ShardOf(5, shards) == dyntable.ShardOf(6, shards) {
		t.Fatal("keys 5 and 6 share a shard: pick others")
	}
	s5, s6 := dyntable.ShardOf(5, shards), dyntable.ShardOf(6, shards)
	tab, err := dyntable.NewMirror(cfg, shards)
	if err != nil {
		t.Fatal(err)
	}
	p := Params{Tensors: map[string]*tensor.Tensor{"W": filled(tensor.Shape{2, 4}, 0)}, Tables: map[string]*dyntable.Table{"emb": tab}}
	m, err := NewModel(g, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	req, err := DecodeRequest([]byte(`{"inputs":[{"name":"rows","datatype":"BYTES","shape":[3],"data":["0,0,5","0,0,6","0,0,7"]}],"outputs":[{"name":"e"}]}`), m.Meta())
	if err != nil {
		t.Fatal(err)
	}
	rows := func() []float32 {
		var res Result
		if err := m.Infer(context.Background(), req, &res); err != nil {
			t.Fatal(err)
		}
		return res.Outputs[0].Floats
	}
	want := func(r5, r6, r7 float32) []float32 {
		return append(append(filled(tensor.Shape{4}, r5).F, filled(tensor.Shape{4}, r6).F...), filled(tensor.Shape{4}, r7).F...)
	}
	// meta: the step a row was last seen (low 32 bits) and its sightings
	vals := func(a, b float32) []float32 {
		return append(filled(tensor.Shape{4}, a).F, filled(tensor.Shape{4}, b).F...)
	}
	if err := m.Apply(Update{Step: 1, Rows: []TableRows{{Name: "emb", Keys: []int64{6, 5}, Meta: []uint64{1<<32 | 8, 1<<32 | 3}, Values: vals(3, 1)}}}); err != nil {
		t.Fatal(err)
	}
	if got := rows(); !slices.Equal(got, want(1, 3, 0)) {
		t.Fatalf("after writing keys 9 and 5: %v", got)
	}
	if err := m.Apply(Update{Step: 2, Rows: []TableRows{{Name: "emb", Keys: []int64{5}, Meta: []uint64{2<<32 | 4}, Values: vals(2, 0)[:4]}}}); err != nil {
		t.Fatal(err)
	}
	if got := rows(); !slices.Equal(got, want(2, 3, 0)) {
		t.Fatalf("after overwriting key 5: %v", got)
	}
	// both shards at watermark 4: key 5 (last seen at 4) is dead, key 6 (8) lives
	if err := m.Apply(Update{Step: 14, Shards: []ShardState{{Name: "emb", Shard: s5, Shards: shards, Watermark: 4}, {Name: "emb", Shard: s6, Shards: shards, Watermark: 4}}}); err != nil {
		t.Fatal(err)
	}
	if got := rows(); !slices.Equal(got, want(0, 3, 0)) {
		t.Fatalf("after key 5's shard's watermark passed it: %v", got)
	}
	if err := m.Apply(Update{Step: 15, Shards: []ShardState{{Name: "emb", Shard: s6, Shards: shards, Watermark: 4, Whole: true}}}); err != nil {
		t.Fatal(err)
	}
	if got := rows(); !slices.Equal(got, want(0, 0, 0)) {
		t.Fatalf("after key 6's shard was sent whole without it: %v", got)
	}
	for _, bad := range []Update{
		{Step: 16, Shards: []ShardState{{Name: "emb", Shard: 0, Shards: 3}}},
		{Step: 16, Shards: []ShardState{{Name: "nope", Shard: 0, Shards: 2}}},
		{Step: 16, Rows: []TableRows{{Name: "emb", Keys: []int64{1}, Values: make([]float32, 4)}}},
	} {
		if err := m.Apply(bad); err == nil {
			t.Errorf("applied %+v, which does not fit the model", bad)
		}
	}
}
