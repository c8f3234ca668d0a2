package blas

import "math"

// ExpSub writes y[i] = exp(x[i] - m) and returns their sum, for the
// x[i] <= m of a softmax (m the row's largest): Cephes' expf, x - m =
// k ln2 + r with |r| <= ln2/2, exp(r) by a degree-7 polynomial, times 2^k;
// 16 values at a time with AVX-512, the rest one by one. Within 2 ulp of
// math.Exp rounded to float32 (TestExpSub); an x - m below -87.33654 (where
// exp falls under float32's smallest normal) gives exp(-87.33654), an x - m
// above 0 and NaN take math.Exp. The sum adds float32 values in 16 lanes.
func ExpSub(x []float32, m float32, y []float32) float32 {
	n := len(x)
	y = y[:n]
	v := vecLen(n)
	var s float32
	if v > 0 {
		s = expSubVec(&x[0], m, &y[0], v)
	}
	for i := v; i < n; i++ {
		e := expNonPos(x[i] - m)
		y[i] = e
		s += e
	}
	return s
}

// expNonPos is exp(x) for x <= 0, ExpSub's scalar form.
func expNonPos(x float32) float32 {
	if !(x <= 0) {
		return float32(math.Exp(float64(x)))
	}
	const (
		lowest = -87.33654 // exp(lowest) is float32's smallest normal
		log2e  = 1.44269504088896341
		ln2hi  = 0.693359375
		ln2lo  = -2.12194440e-4
	)
	x = max(x, lowest)
	u := x*log2e + 0.5 // k = floor(u), the integer nearest x log2e
	k := int32(u)      // toward zero
	if float32(k) > u {
		k--
	}
	fk := float32(k)
	r := x - fk*ln2hi - fk*ln2lo
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	e := p*r*r + r + 1
	return e * math.Float32frombits(uint32(k+127)<<23)
}
