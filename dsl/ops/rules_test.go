package ops_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
)

// Tests of the catalog's pure rules: shape errors, checked when a model
// loads, before any kernel exists. The kernels' tests (forward values,
// gradients against finite differences) are in exec/kernels.

// Shape errors say what is wrong and show the shapes involved.
func TestNewOpShapeErrors(t *testing.T) {
	for _, c := range []struct{ vars, op, want string }{
		{"a: {shape: [2, 3]}\n  b: {shape: [3, 2]}", "{type: mse, inputs: [a, b], outputs: [y]}", "pred [2, 3] and target [3, 2] must have the same shape"},
		{"a: {shape: [2, 3]}\n  b: {shape: [2]}", "{type: sigmoid_cross_entropy, inputs: [a, b], outputs: [y]}", "logits [2, 3] and labels [2] must have the same shape"},
		{"a: {shape: [2, 3]}", "{type: transpose, inputs: [a], outputs: [y], attrs: {perm: [0, 0]}}", "perm [0, 0] is not a permutation of the 2 axes"},
		{"a: {shape: [2, 3]}", "{type: transpose, inputs: [a], outputs: [y], attrs: {perm: [1, 0, 2]}}", "for input [2, 3]"},
		{"a: {shape: [2, 3]}", "{type: reshape, inputs: [a], outputs: [y], attrs: {shape: [4]}}", "cannot reshape [2, 3] (6 elements) to [4] (4 elements)"},
		{"a: {shape: [2, 3]}", "{type: reshape, inputs: [a], outputs: [y], attrs: {shape: [0, 6]}}", "dimensions must be positive"},
		{"a: {shape: [4, 3]}\n  b: {shape: [2]}", "{type: lookup_table, inputs: [a, b], outputs: [y]}", "ids must be int32, got float32[2]"},
		{"a: {shape: [4]}\n  b: {shape: [2], dtype: int32}", "{type: lookup_table, inputs: [a, b], outputs: [y]}", "table must be float32 [V, D], got float32[4]"},
		{"a: {shape: []}", "{type: softmax, inputs: [a], outputs: [y]}", "at least one axis"},
		{"a: {shape: [2, 27]}", "{type: dot_interaction, inputs: [a], outputs: [y]}", "x must be float32 [B, F, D] (F feature vectors of D values per row; stack builds it from F inputs [B, D]), got float32[2, 27]"},
		{"a: {shape: [2, 1, 4]}", "{type: dot_interaction, inputs: [a], outputs: [y]}", "there is no pair to interact"},
		{"a: {shape: [2, 3]}\n  b: {shape: [2, 4]}", "{type: stack, inputs: [a, b], outputs: [y]}", "input 1 is float32[2, 4], input 0 is float32[2, 3]: stacked inputs must have one dtype and shape"},
		{"a: {shape: [2, 3]}", "{type: stack, inputs: [a], outputs: [y], attrs: {axis: 3}}", "axis 3 is out of range for stacking inputs of shape [2, 3] (0 to 2, or -3 to -1)"},
		{"a: {shape: [2, 3]}\n  b: {shape: [2, 3, 4]}", "{type: batch_matmul, inputs: [a, b], outputs: [y]}", "inputs must be 3-D [B, M, K] and [B, K, N], got [2, 3] and [2, 3, 4]"},
		{"a: {shape: [2, 2, 3]}\n  b: {shape: [3, 3, 4]}", "{type: batch_matmul, inputs: [a, b], outputs: [y]}", "batch dimensions differ"},
		{"a: {shape: [2, 2, 3]}\n  b: {shape: [2, 4, 3]}", "{type: batch_matmul, inputs: [a, b], outputs: [y]}", "inner dimensions differ: [2, 2, 3] · [2, 4, 3] (transpose_a=false, transpose_b=false): 3 vs 4"},
		{"a: {shape: [4, 3]}\n  b: {shape: [2], dtype: int32}", "{type: embedding_bag, inputs: [a, b], outputs: [y]}", "ids must be int32 [batch, L] (or [..., L]: the last axis holds a bag's ids), got int32[2]"},
		{"a: {shape: [4, 3]}\n  b: {shape: [2, 3], dtype: int32}", "{type: embedding_bag, inputs: [a, b], outputs: [y], attrs: {mode: avg}}", `mode "avg" is not one of sum, mean, sqrtn`},
		{"a: {shape: [4, 3]}\n  b: {shape: [2, 3]}", "{type: embedding_bag, inputs: [a, b], outputs: [y]}", "ids must be int32, got float32[2, 3]"},
	} {
		src := "psgraph: 1\nstate:\n  " + c.vars + "\nops:\n  - " + c.op + "\n"
		_, err := dsl.LoadBytes("m.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.op, err, c.want)
		}
	}
}

func TestAUCShapeErrors(t *testing.T) {
	for _, c := range []struct{ state, want string }{
		{"  s: {shape: [4, 3]}\n  y: {shape: [4], dtype: int32}", "scores must be float32 [batch], [batch, 1]"},
		{"  s: {shape: [4], dtype: int32}\n  y: {shape: [4], dtype: int32}", "scores must be float32"},
		{"  s: {shape: [4]}\n  y: {shape: [4, 2]}", "label must be 0 and 1, as int32 [batch] or float32 [batch] or [batch, 1]"},
		{"  s: {shape: [4]}\n  y: {shape: [5], dtype: int32}", "differ in batch size"},
	} {
		src := "psgraph: 1\nstate:\n" + c.state + "\nops:\n  - {type: auc, inputs: [s, y], outputs: [a]}\n"
		_, err := dsl.LoadBytes(filepath.Join(t.TempDir(), "m.yaml"), []byte(src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s\nerror %v, want one containing %q", c.state, err, c.want)
		}
	}
}

// The new ops' shape and attribute errors.
func TestReduceIntNormShapeErrors(t *testing.T) {
	for _, c := range []struct{ vars, op, want string }{
		{"a: {shape: [2, 3]}", "{type: reduce_max, inputs: [a], outputs: [y], attrs: {axis: 2}}", "axis 2 is out of range for shape [2, 3]"},
		{"a: {shape: [2, 3], dtype: int32}", "{type: logsumexp, inputs: [a], outputs: [y]}", "input must be float32, got int32[2, 3]"},
		{"a: {shape: [2, 3]}", "{type: cast, inputs: [a], outputs: [y], attrs: {to: int16}}", `to: "int16" is not a dtype; write float32, int32 or int64`},
		{"a: {shape: [2, 3], dtype: int64}", "{type: cast, inputs: [a], outputs: [y], attrs: {to: int64}}", "x is already int64[2, 3]: nothing to cast"},
		{"a: {shape: [2, 3]}", "{type: cast, inputs: [a], outputs: [y], attrs: {to: float32}}", "x is already float32[2, 3]: nothing to cast (use identity for a copy)"},
		{"a: {shape: [4]}", "{type: hash_cross, inputs: [a], outputs: [y], attrs: {buckets: 10}}", "input 0 must be int32 ids or int64 keys [batch] or [batch, k], got float32[4]"},
		{"a: {shape: [4], dtype: int32}\n  b: {shape: [3, 2], dtype: int32}", "{type: hash_cross, inputs: [a, b], outputs: [y], attrs: {buckets: 10}}", "input 1 has 3 rows, input 0 has 4"},
		{"a: {shape: [4], dtype: int32}", "{type: hash_cross, inputs: [a], outputs: [y], attrs: {buckets: 0}}", "buckets 0 is outside [1, 2^31-1]"},
		{"a: {shape: [4, 2, 2], dtype: int32}", "{type: hash_cross, inputs: [a], outputs: [y], attrs: {buckets: 5}}", "input 0 must be int32 ids or int64 keys [batch] or [batch, k], got int32[4, 2, 2]"},
		{"a: {shape: [4], dtype: int64}", "{type: hash_cross, inputs: [a], outputs: [y]}", "buckets is required: the size of the id space [0, buckets), 1 to 2^31-1 (or dtype: int64 for a 64-bit key without buckets)"},
		{"a: {shape: [4], dtype: int64}", "{type: hash_cross, inputs: [a], outputs: [y], attrs: {buckets: 10, dtype: int64}}", "buckets 10 with dtype: int64: an int64 cross is the whole 64-bit hash, with no bucket space; remove buckets"},
		{"a: {shape: [4], dtype: int64}", "{type: hash_cross, inputs: [a], outputs: [y], attrs: {dtype: uint64}}", `dtype "uint64" is not int32 (ids in [0, buckets)) or int64 (64-bit keys)`},
		{"a: {shape: [4, 3]}\n  b: {shape: [2], dtype: int64}", "{type: lookup_table, inputs: [a, b], outputs: [y]}", "ids are 64-bit keys (int64[2]), but a table [V, D] is read by int32 ids in [0, V): read the column with hash_buckets: V instead of key, or map the keys onto the rows with hash_cross (buckets: V)"},
		{"a: {shape: [4, 3]}\n  b: {shape: [2, 3], dtype: int64}", "{type: embedding_bag, inputs: [a, b], outputs: [y]}", "ids are 64-bit keys (int64[2, 3])"},
		{"a: {shape: [2, 3]}", "{type: arange_like, inputs: [a], outputs: [y], attrs: {axis: 2}}", "axis 2 is out of range"},
		{"x: {shape: [2, 3]}\n  g: {shape: [4]}\n  b: {shape: [3]}", "{type: layer_norm, inputs: [x, g, b], outputs: [y]}", "gamma must be float32 [3] (the size of the last axis of x), got float32[4]"},
		{"x: {shape: [2, 3, 4]}\n  g: {shape: [4]}\n  b: {shape: [4]}\n  m: {shape: [4]}\n  v: {shape: [4]}", "{type: batch_norm, inputs: [x, g, b, m, v], outputs: [y, m2, v2]}", "x must be float32 [batch, C], got float32[2, 3, 4]"},
		{"x: {shape: [2, 3]}\n  g: {shape: [3]}\n  b: {shape: [3]}\n  m: {shape: [3]}\n  v: {shape: [2]}", "{type: batch_norm, inputs: [x, g, b, m, v], outputs: [y, m2, v2]}", "running_var must be float32 [3] (x's columns), got float32[2]"},
		{"x: {shape: [2, 3]}\n  g: {shape: [3]}\n  b: {shape: [3]}\n  m: {shape: [3]}\n  v: {shape: [3]}", "{type: batch_norm, inputs: [x, g, b, m, v], outputs: [y, m2, v2], attrs: {momentum: 1.5}}", "momentum 1.5 is outside [0, 1]"},
	} {
		src := "psgraph: 1\nstate:\n  " + c.vars + "\nops:\n  - " + c.op + "\n"
		_, err := dsl.LoadBytes("m.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.op, err, c.want)
		}
	}
}
