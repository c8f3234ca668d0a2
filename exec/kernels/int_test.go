package kernels_test

import (
	"math"
	"strings"
	"testing"
)

// cast to int32 stops the run at a float that is no int32, naming the
// element, instead of writing an unspecified integer.
func TestCastRefusesNonIntegers(t *testing.T) {
	p := compileModel(t, `psgraph: 1
state:
  x: {shape: [3]}
ops:
  - {type: cast, inputs: [x], outputs: [y], attrs: {to: int32}}
`, 1)
	for _, c := range []struct {
		x    []float32
		want string
	}{
		{[]float32{1, float32(math.NaN()), 2}, "element 1 is NaN"},
		{[]float32{1, 2, 3e9}, "element 2 is 3e+09"},
		{[]float32{float32(math.Inf(-1)), 0, 0}, "element 0 is -Inf"},
		{[]float32{-2147483648, 2147483520, -0.9}, ""},
	} {
		copy(p.Scope["x"].F, c.x)
		err := runOnce(t, p)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("cast of %v: %v", c.x, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("cast of %v: error %v, want one containing %q", c.x, err, c.want)
		}
	}
	if got := p.Scope["y"].I; got[0] != -2147483648 || got[1] != 2147483520 || got[2] != 0 {
		t.Errorf("cast of the int32 bounds and -0.9 gave %v", got)
	}
}

// hash_cross spreads crosses of neighbouring ids evenly: the 90000 crosses
// of ids 0..299 with 0..299 (consecutive values, where a weak mix crowds
// into few buckets) fill 1000 buckets about as a uniform draw does. With a
// uniform draw each bucket's count is near Poisson(90), sd 9.5.
func TestHashCrossSpreadsNeighbouringIDs(t *testing.T) {
	const n, buckets = 300, 1000
	p := compileModel(t, `psgraph: 1
state:
  a: {shape: [90000], dtype: int32}
  b: {shape: [90000], dtype: int32}
ops:
  - {type: hash_cross, inputs: [a, b], outputs: [y], attrs: {buckets: 1000}}
`, 1)
	for i := range n * n {
		p.Scope["a"].I[i], p.Scope["b"].I[i] = int32(i/n), int32(i%n)
	}
	if err := runOnce(t, p); err != nil {
		t.Fatal(err)
	}
	counts := make([]int, buckets)
	for _, id := range p.Scope["y"].I {
		if id < 0 || id >= buckets {
			t.Fatalf("id %d outside [0, %d)", id, buckets)
		}
		counts[id]++
	}
	var chi2 float64
	lo, hi := n*n, 0
	for _, c := range counts {
		d := float64(c) - n*n/buckets
		chi2 += d * d / (n * n / buckets)
		lo, hi = min(lo, c), max(hi, c)
	}
	// 999 degrees of freedom: mean 999, sd 44.7; 1200 is 4.5 sd.
	if chi2 > 1200 || lo < 50 || hi > 135 {
		t.Errorf("bucket counts from %d to %d, chi-square %.0f over 999 degrees of freedom: not a uniform spread", lo, hi, chi2)
	}
}

// In-batch negatives (docs/dsl.md): with scores[i][j] = u_i · v_j and
// labels arange_like(scores), softmax_cross_entropy is the mean over rows
// of logsumexp(scores_i) - scores_ii, computed here in float64 from u and
// v; logsumexp's output is each row's term.
func TestInBatchNegatives(t *testing.T) {
	p := compileModel(t, `psgraph: 1
state:
  u: {shape: [4, 3]}
  v: {shape: [4, 3]}
ops:
  - {type: matmul, inputs: [u, v], outputs: [scores], attrs: {transpose_b: true}}
  - {type: arange_like, inputs: [scores], outputs: [pos]}
  - {type: softmax_cross_entropy, inputs: [scores, pos], outputs: [loss]}
  - {type: logsumexp, inputs: [scores], outputs: [lse], attrs: {axis: 1}}
`, 1)
	u := []float32{1, 2, -1, 0.5, 0, 3, -2, 1, 1, 4, 4, -3}
	v := []float32{0.5, -1, 2, 3, 3, 0, 1, -1, 1, 2, 0, -2}
	copy(p.Scope["u"].F, u)
	copy(p.Scope["v"].F, v)
	if err := runOnce(t, p); err != nil {
		t.Fatal(err)
	}
	var want float64
	for i := range 4 {
		var lse float64
		var s [4]float64
		for j := range 4 {
			for k := range 3 {
				s[j] += float64(u[i*3+k]) * float64(v[j*3+k])
			}
			lse += math.Exp(s[j])
		}
		lse = math.Log(lse)
		if got := float64(p.Scope["lse"].F[i]); !near(got, lse, 1e-6) {
			t.Errorf("logsumexp of row %d = %v, want %v", i, got, lse)
		}
		want += (lse - s[i]) / 4
		if p.Scope["pos"].I[i] != int32(i) {
			t.Errorf("arange_like = %v", p.Scope["pos"].I)
		}
	}
	if got := float64(p.Scope["loss"].F[0]); !near(got, want, 1e-6) {
		t.Errorf("in-batch softmax loss %v, want %v", got, want)
	}
}

// A Wide & Deep cross as docs/dsl.md writes it: two columns of an id
// matrix sliced out, crossed and looked up in a table, which trains on
// the crossed rows only (its row gradient holds the cross ids). The cross
// of the [batch, 2] slice is the cross of its two columns given apart.
func TestCrossFeedsLookupTable(t *testing.T) {
	src := `psgraph: 1
params:
  wide: {shape: [50, 1], init: {type: normal, seed: 1}}
state:
  cat: {shape: [4, 3], dtype: int32}
ops:
  - {type: slice_rows, inputs: [cat], outputs: [c1c2], attrs: {start: 0, end: 2, axis: 1}}
  - {type: hash_cross, inputs: [c1c2], outputs: [cross], attrs: {buckets: 50}}
  - {type: slice_rows, inputs: [cat], outputs: [c1], attrs: {start: 0, end: 1, axis: 1}}
  - {type: slice_rows, inputs: [cat], outputs: [c2], attrs: {start: 1, end: 2, axis: 1}}
  - {type: hash_cross, inputs: [c1, c2], outputs: [apart], attrs: {buckets: 50}}
  - {type: lookup_table, inputs: [wide, cross], outputs: [w]}
  - {type: sum, inputs: [w], outputs: [loss]}
train: {loss: loss, batch: 4, optimizer: {type: sgd, lr: 0.1}}
`
	p := compileModel(t, src, 4)
	copy(p.Scope["cat"].I, []int32{3, 5, 9, 5, 3, 9, 3, 5, 1, 7, 7, 7})
	if err := runOnce(t, p); err != nil {
		t.Fatal(err)
	}
	cross, apart := p.Scope["cross"].I, p.Scope["apart"].I
	for i := range cross {
		if cross[i] != apart[i] {
			t.Errorf("row %d: the cross of the slice is %d, of its columns %d", i, cross[i], apart[i])
		}
	}
	if cross[0] != cross[2] || cross[0] == cross[1] {
		t.Errorf("crosses %v: rows 0 and 2 (3, 5) must share an id, row 1 (5, 3) not", cross)
	}
	g := p.Scope["wide@GRAD"]
	if g.Rows == nil || len(g.Rows.IDs) != 3 {
		t.Fatalf("wide@GRAD holds rows %v, want the 3 distinct crosses of %v", g.Rows, cross)
	}
	for _, r := range g.Rows.IDs {
		if r != cross[0] && r != cross[1] && r != cross[3] {
			t.Errorf("wide@GRAD holds row %d, not a cross of %v", r, cross)
		}
	}
}

// The example of docs/dsl.md: the cross of ids 3 and 5 into 1000 buckets
// is 148, with salt 7 it is 909 (testdata/cross/gen_reference.py prints
// both from the documented formula), and the cross of 5 and 3 another id.
func TestHashCrossDocumentedExample(t *testing.T) {
	p := compileModel(t, `psgraph: 1
state:
  a: {shape: [2], dtype: int32}
  b: {shape: [2], dtype: int32}
ops:
  - {type: hash_cross, inputs: [a, b], outputs: [y], attrs: {buckets: 1000}}
  - {type: hash_cross, inputs: [a, b], outputs: [salted], attrs: {buckets: 1000, salt: 7}}
`, 1)
	copy(p.Scope["a"].I, []int32{3, 5})
	copy(p.Scope["b"].I, []int32{5, 3})
	if err := runOnce(t, p); err != nil {
		t.Fatal(err)
	}
	y, salted := p.Scope["y"].I, p.Scope["salted"].I
	if y[0] != 148 || salted[0] != 909 || y[1] == 148 {
		t.Errorf("crosses of (3, 5) and (5, 3): %v, salted %v; want 148, not 148 and salt 7 909", y, salted)
	}
}

// A cast to int64 stops the run at a float that is no int64, and a cast
// of int64 keys to int32 at a key that is no int32, naming the element;
// the extremes that fit pass exactly.
func TestCastRefusesOutOfRangeInt64(t *testing.T) {
	p := compileModel(t, `psgraph: 1
state:
  x: {shape: [3]}
  k: {shape: [3], dtype: int64}
ops:
  - {type: cast, inputs: [x], outputs: [y], attrs: {to: int64}}
  - {type: cast, inputs: [k], outputs: [i], attrs: {to: int32}}
`, 1)
	for _, c := range []struct {
		x    []float32
		k    []int64
		want string
	}{
		{[]float32{1, float32(math.NaN()), 2}, []int64{0, 0, 0}, "element 1 is NaN, which is not an int64"},
		{[]float32{9.3e18, 0, 0}, []int64{0, 0, 0}, "element 0 is 9.3e+18, which is not an int64"},
		{[]float32{0, 0, 0}, []int64{0, 0, 1 << 31}, "element 2 is 2147483648, which is not an int32"},
		{[]float32{0, 0, 0}, []int64{math.MinInt32 - 1, 0, 0}, "element 0 is -2147483649, which is not an int32"},
		{[]float32{-9223372036854775808, 9.2233715e18, -0.9}, []int64{math.MinInt32, math.MaxInt32, -1}, ""},
	} {
		copy(p.Scope["x"].F, c.x)
		copy(p.Scope["k"].L, c.k)
		err := runOnce(t, p)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("cast of %v, %v: %v", c.x, c.k, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("cast of %v, %v: error %v, want one containing %q", c.x, c.k, err, c.want)
		}
	}
	if y := p.Scope["y"].L; y[0] != math.MinInt64 || y[1] != 9223371487098961920 || y[2] != 0 {
		t.Errorf("cast of -2^63, the largest float32 below 2^63 and -0.9 to int64 gave %v", y)
	}
	if i := p.Scope["i"].I; i[0] != math.MinInt32 || i[1] != math.MaxInt32 || i[2] != -1 {
		t.Errorf("cast of the int32 bounds and -1 from int64 gave %v", i)
	}
}

// A cross keeps its value when ids widen: int32 ids and the int64 keys
// of the same values (cast) cross into the same bucket and the same key,
// negative ids included.
func TestCrossKeepsItsValueWhenIDsWiden(t *testing.T) {
	p := compileModel(t, `psgraph: 1
state:
  a: {shape: [4], dtype: int32}
  b: {shape: [4, 2], dtype: int32}
ops:
  - {type: cast, inputs: [a], outputs: [a64], attrs: {to: int64}}
  - {type: cast, inputs: [b], outputs: [b64], attrs: {to: int64}}
  - {type: hash_cross, inputs: [a, b], outputs: [id32], attrs: {buckets: 1000}}
  - {type: hash_cross, inputs: [a64, b64], outputs: [id64], attrs: {buckets: 1000}}
  - {type: hash_cross, inputs: [a, b64], outputs: [mixed], attrs: {buckets: 1000}}
  - {type: hash_cross, inputs: [a, b], outputs: [key32], attrs: {dtype: int64}}
  - {type: hash_cross, inputs: [a64, b64], outputs: [key64], attrs: {dtype: int64}}
`, 1)
	copy(p.Scope["a"].I, []int32{3, -1, 0, math.MaxInt32})
	copy(p.Scope["b"].I, []int32{5, 7, -2, 0, 1, 1, math.MinInt32, 9})
	if err := runOnce(t, p); err != nil {
		t.Fatal(err)
	}
	s := p.Scope
	for r := range 4 {
		if s["id32"].I[r] != s["id64"].I[r] || s["id32"].I[r] != s["mixed"].I[r] || s["key32"].L[r] != s["key64"].L[r] {
			t.Errorf("row %d: buckets %d, %d, %d and keys %d, %d differ between int32 ids and int64 keys", r, s["id32"].I[r], s["id64"].I[r], s["mixed"].I[r], s["key32"].L[r], s["key64"].L[r])
		}
	}
	if s["key32"].L[0] == s["key32"].L[1] {
		t.Errorf("rows 0 and 1 cross into one key %d", s["key32"].L[0])
	}
}
