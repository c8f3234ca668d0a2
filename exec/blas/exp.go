package blas

import "math"

// ExpSub writes y[i] = exp(x[i] - m) and returns their sum, for the
// x[i] <= m of a softmax (m the row's largest): Cephes' expf, x - m =
// k ln2 + r with |r| <= ln2/2, exp(r) by a degree-7 polynomial, times 2^k;
// 16 values at a time with AVX-512 or AVX2, the rest one by one. Within 2
// ulp of math.Exp rounded to float32 (TestExpSub); an x - m below
// -87.33654 (where exp falls under float32's smallest normal) gives
// exp(-87.33654), and NaN stays NaN. An x - m above 0 (no softmax's) gets
// exp within 2 ulp too up to 88.7, and +Inf above (the AVX-512 body: NaN
// for an x - m of +Inf). The sum adds float32 values in 16 lanes (the
// vector part, the same sum on both vector paths), then the rest in order.
func ExpSub(x []float32, m float32, y []float32) float32 {
	n := len(x)
	y = y[:n]
	v, s := expSubVec(x, m, y)
	x, y = x[v:], y[v:]
	for i := range x {
		e := exp32(max(x[i]-m, expSubLowest))
		y[i] = e
		s += e
	}
	return s
}

const (
	expSubLowest = -87.33654 // exp of it is float32's smallest normal
	expLowest    = -104      // exp of it rounds to 0
	expHighest   = 89        // exp of it is +Inf
)

// exp32 is the vector bodies' exp in Go, branch-free: v = min(max(v, -104),
// 89) (NaN stays NaN); k = round(v log2e) by adding 1.5 x 2^23 (the float's
// own rounding, to nearest even); r = v - k ln2 in two parts; exp(r) = 1 +
// r + r² p(r); times 2^(k>>1) and 2^(k - k>>1), two normal powers, so the
// last product alone rounds (to a subnormal or 0 at the bottom, +Inf at
// the top). The explicit float32 conversions keep the compiler from fusing
// what the vector bodies round apart.
func exp32(v float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
		round = 0x1.8p23
	)
	v = min(max(v, expLowest), expHighest)
	t := float32(v*log2e) + round
	k := int32(math.Float32bits(t)) - 0x4b400000 // t's integer
	fk := t - round
	r := v - fk*ln2hi // exact product
	r -= fk * ln2lo
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	e := p*float32(r*r) + r + 1
	k1 := k >> 1
	e *= math.Float32frombits(uint32(k1+127) << 23)
	return e * math.Float32frombits(uint32(k-k1+127)<<23)
}
