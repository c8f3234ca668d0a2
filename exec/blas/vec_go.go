package blas

import "math"

// The Go bodies of vec.go: the whole of each kernel without a vector path,
// the tail past the vector width with one. Four values a trip (the
// sub-slices of four let the compiler drop the bounds checks), and where
// the sign decides, a mask of the bits rather than a branch: a branch on
// the sign of random activations mispredicts every other value.

// reluGo: y = x, with the bits cleared where x < 0.
func reluGo(x, y []float32) {
	x = x[:len(y)]
	i := 0
	for ; i+4 <= len(y); i += 4 {
		a, b := x[i:i+4:i+4], y[i:i+4:i+4]
		b[0], b[1], b[2], b[3] = relu1(a[0]), relu1(a[1]), relu1(a[2]), relu1(a[3])
	}
	for ; i < len(y); i++ {
		y[i] = relu1(x[i])
	}
}

// relu1 is v, or +0 where v < 0: where its bits are those of -Inf to the
// smallest negative subnormal, 0x80000001 to 0xff800000 (not -0, not a
// NaN). The unsigned comparison is a borrow in 64 bits, not a branch.
func relu1(v float32) float32 {
	b := math.Float32bits(v)
	neg := (uint64(b-0x80000001) - 0x7f800000) >> 63
	return math.Float32frombits(b & (uint32(neg) - 1))
}

// reluGradGo: dx = dy, with the bits cleared unless y > 0.
func reluGradGo(dy, y, dx []float32) {
	dy, y = dy[:len(dx)], y[:len(dx)]
	i := 0
	for ; i+4 <= len(dx); i += 4 {
		g, v, d := dy[i:i+4:i+4], y[i:i+4:i+4], dx[i:i+4:i+4]
		d[0], d[1], d[2], d[3] = reluGrad1(g[0], v[0]), reluGrad1(g[1], v[1]), reluGrad1(g[2], v[2]), reluGrad1(g[3], v[3])
	}
	for ; i < len(dx); i++ {
		dx[i] = reluGrad1(dy[i], y[i])
	}
}

// reluGrad1 is g where v > 0: where v's bits are those of the smallest
// positive subnormal to +Inf, 1 to 0x7f800000.
func reluGrad1(g, v float32) float32 {
	pos := (uint64(math.Float32bits(v)-1) - 0x7f800000) >> 63
	return math.Float32frombits(math.Float32bits(g) & -uint32(pos))
}

func addGo(x, y, z []float32) {
	x, y = x[:len(z)], y[:len(z)]
	i := 0
	for ; i+4 <= len(z); i += 4 {
		a, b, c := x[i:i+4:i+4], y[i:i+4:i+4], z[i:i+4:i+4]
		c[0], c[1], c[2], c[3] = a[0]+b[0], a[1]+b[1], a[2]+b[2], a[3]+b[3]
	}
	for ; i < len(z); i++ {
		z[i] = x[i] + y[i]
	}
}

func subGo(x, y, z []float32) {
	x, y = x[:len(z)], y[:len(z)]
	i := 0
	for ; i+4 <= len(z); i += 4 {
		a, b, c := x[i:i+4:i+4], y[i:i+4:i+4], z[i:i+4:i+4]
		c[0], c[1], c[2], c[3] = a[0]-b[0], a[1]-b[1], a[2]-b[2], a[3]-b[3]
	}
	for ; i < len(z); i++ {
		z[i] = x[i] - y[i]
	}
}

func mulGo(x, y, z []float32) {
	x, y = x[:len(z)], y[:len(z)]
	i := 0
	for ; i+4 <= len(z); i += 4 {
		a, b, c := x[i:i+4:i+4], y[i:i+4:i+4], z[i:i+4:i+4]
		c[0], c[1], c[2], c[3] = a[0]*b[0], a[1]*b[1], a[2]*b[2], a[3]*b[3]
	}
	for ; i < len(z); i++ {
		z[i] = x[i] * y[i]
	}
}

func divGo(x, y, z []float32) {
	x, y = x[:len(z)], y[:len(z)]
	i := 0
	for ; i+4 <= len(z); i += 4 {
		a, b, c := x[i:i+4:i+4], y[i:i+4:i+4], z[i:i+4:i+4]
		c[0], c[1], c[2], c[3] = a[0]/b[0], a[1]/b[1], a[2]/b[2], a[3]/b[3]
	}
	for ; i < len(z); i++ {
		z[i] = x[i] / y[i]
	}
}

func divByGo(s float32, x, y []float32) {
	x = x[:len(y)]
	i := 0
	for ; i+4 <= len(y); i += 4 {
		a, b := x[i:i+4:i+4], y[i:i+4:i+4]
		b[0], b[1], b[2], b[3] = a[0]/s, a[1]/s, a[2]/s, a[3]/s
	}
	for ; i < len(y); i++ {
		y[i] = x[i] / s
	}
}

func scaleGo(a, b float32, x, y []float32) {
	x = x[:len(y)]
	i := 0
	for ; i+4 <= len(y); i += 4 {
		u, v := x[i:i+4:i+4], y[i:i+4:i+4]
		v[0], v[1], v[2], v[3] = a*u[0]+b, a*u[1]+b, a*u[2]+b, a*u[3]+b
	}
	for ; i < len(y); i++ {
		y[i] = a*x[i] + b
	}
}

func sqrtGo(x, y []float32) {
	x = x[:len(y)]
	for i, v := range x {
		y[i] = float32(math.Sqrt(float64(v))) // one instruction
	}
}

func expGo(x, y []float32) {
	x = x[:len(y)]
	for i, v := range x {
		y[i] = exp32(v)
	}
}

func sigmoidGo(x, y []float32) {
	x = x[:len(y)]
	for i, v := range x {
		y[i] = sigmoid1(v)
	}
}

// sigmoid1: e = exp(-|v|); (e where v's sign bit is set, else 1) / (1 + e).
func sigmoid1(v float32) float32 {
	b := math.Float32bits(v)
	e := exp32(-math.Float32frombits(b &^ (1 << 31)))
	neg := -(b >> 31) // all ones where the sign is set
	num := math.Float32frombits(math.Float32bits(e)&neg | 0x3f800000&^neg)
	return num / (1 + e)
}

func sigmoidGradGo(dy, y, dx []float32) {
	dy, y = dy[:len(dx)], y[:len(dx)]
	i := 0
	for ; i+4 <= len(dx); i += 4 {
		g, v, d := dy[i:i+4:i+4], y[i:i+4:i+4], dx[i:i+4:i+4]
		d[0] = float32(g[0]*v[0]) * (1 - v[0])
		d[1] = float32(g[1]*v[1]) * (1 - v[1])
		d[2] = float32(g[2]*v[2]) * (1 - v[2])
		d[3] = float32(g[3]*v[3]) * (1 - v[3])
	}
	for ; i < len(dx); i++ {
		dx[i] = float32(dy[i]*y[i]) * (1 - y[i])
	}
}

func tanhGo(x, y []float32) {
	x = x[:len(y)]
	for i, v := range x {
		y[i] = tanh1(v)
	}
}

// tanh1 computes both of Cephes' forms and keeps the one for |v|: no
// branch.
func tanh1(v float32) float32 {
	b := math.Float32bits(v)
	t := math.Float32frombits(b &^ (1 << 31))
	e := exp32(t + t)
	big := math.Float32bits(1-2/(e+1)) | b&(1<<31)
	z := v * v
	q := float32(-5.70498872745e-3)
	q = q*z + 2.06390887954e-2
	q = q*z - 5.37397155531e-2
	q = q*z + 1.33314422036e-1
	q = q*z - 3.33332819422e-1
	small := math.Float32bits(q*float32(v*z) + v)
	// below: all ones where t < 0.625 (t's bits below 0x3f200000; a NaN's
	// are above).
	below := uint32(int32(math.Float32bits(t)-0x3f200000) >> 31)
	return math.Float32frombits(small&below | big&^below)
}

func tanhGradGo(dy, y, dx []float32) {
	dy, y = dy[:len(dx)], y[:len(dx)]
	i := 0
	for ; i+4 <= len(dx); i += 4 {
		g, v, d := dy[i:i+4:i+4], y[i:i+4:i+4], dx[i:i+4:i+4]
		d[0] = g[0] * (1 - float32(v[0]*v[0]))
		d[1] = g[1] * (1 - float32(v[1]*v[1]))
		d[2] = g[2] * (1 - float32(v[2]*v[2]))
		d[3] = g[3] * (1 - float32(v[3]*v[3]))
	}
	for ; i < len(dx); i++ {
		dx[i] = dy[i] * (1 - float32(y[i]*y[i]))
	}
}
