package kernels

import (
	"math/rand/v2"
	"testing"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/tensor"
)

// order0 is the key the test adds first, from an input of its own: the
// batch's first non-padding key (so it is counted twice).
func order0(keys []int64) int64 {
	for _, k := range keys {
		if k != ir.PadKey {
			return k
		}
	}
	return 1
}

// addInputs (addAll, which asks for a group of keys' home entries before
// adding them) against a map: two inputs, one key and 1,000 keys over 200
// values (duplicates within and across groups of addGroup), a tenth of
// them padding. The step's keys are the distinct ones in order of first
// arrival, each counted as often as it came, padding never, and each flat
// key's position is what dyn_pos copies; a second step starts afresh.
func TestDynamicAddAll(t *testing.T) {
	d := &Dynamic{}
	d.size(1000)
	rng := rand.New(rand.NewPCG(5, 6))
	keys := make([]int64, 1000)
	// One ids tensor, its contents rewritten every step, as a program's.
	ids := &tensor.Tensor{DType: tensor.I64, Shape: tensor.Shape{len(keys)}, L: keys}
	for step := range 3 {
		for i := range keys {
			keys[i] = int64(rng.Uint64N(200)) * 0x1000_0000_0001
			if rng.IntN(10) == 0 {
				keys[i] = ir.PadKey
			}
		}
		var order []int64
		count := map[int64]uint32{}
		for _, k := range append([]int64{order0(keys)}, keys...) {
			if k == ir.PadKey {
				continue
			}
			if count[k] == 0 {
				order = append(order, k)
			}
			count[k]++
		}
		other := &tensor.Tensor{DType: tensor.I64, Shape: tensor.Shape{1}, L: []int64{order0(keys)}}
		d.addInputs([]*tensor.Tensor{other, ids})
		if len(d.keys) != len(order) {
			t.Fatalf("step %d: %d keys, want %d", step, len(d.keys), len(order))
		}
		for i, k := range order {
			if d.keys[i] != k || d.counts[i] != count[k] || d.pos(k) != int32(i) {
				t.Fatalf("step %d: key %d at %d: got key %d count %d pos %d, want count %d", step, k, i, d.keys[i], d.counts[i], d.pos(k), count[k])
			}
		}
		if d.pos(ir.PadKey) != -1 {
			t.Fatalf("step %d: padding has a position", step)
		}
		// The positions dyn_pos copies: each flat key's, -1 for padding.
		got := d.positions(ids)
		for i, k := range keys {
			want := int32(-1)
			if k != ir.PadKey {
				want = d.pos(k)
			}
			if got[i] != want {
				t.Fatalf("step %d: flat key %d (%d) at position %d, want %d", step, i, k, got[i], want)
			}
		}
		if d.positions(&tensor.Tensor{}) != nil {
			t.Fatalf("step %d: positions of a tensor not added", step)
		}
		d.reset() // as dyn_accumulate's merge does: no positions left
		if d.positions(ids) != nil {
			t.Fatalf("step %d: positions kept after reset", step)
		}
	}
}
