package blas

import "math"

// Vectorized element-wise loops for the hottest element-wise kernels. Each
// runs its SIMD body on the largest multiple of the vector width and
// finishes the tail in Go; without SIMD support the Go loop does all.

// Relu sets y[i] = max(x[i], 0) for i < len(y); NaN stays NaN.
func Relu(x, y []float32) {
	x = x[:len(y)]
	n := vecLen(len(y))
	if n > 0 {
		reluVec(&x[0], &y[0], n)
	}
	for i := n; i < len(y); i++ {
		if v := x[i]; !(v <= 0) {
			y[i] = v
		} else {
			y[i] = 0
		}
	}
}

// ReluGrad sets dx[i] = dy[i] where y[i] > 0, else 0.
func ReluGrad(dy, y, dx []float32) {
	dy, y = dy[:len(dx)], y[:len(dx)]
	n := vecLen(len(dx))
	if n > 0 {
		reluGradVec(&dy[0], &y[0], &dx[0], n)
	}
	for i := n; i < len(dx); i++ {
		if y[i] > 0 {
			dx[i] = dy[i]
		} else {
			dx[i] = 0
		}
	}
}

// Add sets z[i] = x[i] + y[i] for i < len(z).
func Add(x, y, z []float32) {
	x, y = x[:len(z)], y[:len(z)]
	n := vecLen(len(z))
	if n > 0 {
		addVec(&x[0], &y[0], &z[0], n)
	}
	for i := n; i < len(z); i++ {
		z[i] = x[i] + y[i]
	}
}

// SumRows adds the rows of x (rows x n, row-major) into y (n): a column sum.
func SumRows(x []float32, rows int, y []float32) {
	n := len(y)
	copy(y, x[:n])
	for r := 1; r < rows; r++ {
		Add(y, x[r*n:(r+1)*n], y)
	}
}

// Sub sets z[i] = x[i] - y[i] for i < len(z).
func Sub(x, y, z []float32) {
	x, y = x[:len(z)], y[:len(z)]
	n := vecLen(len(z))
	if n > 0 {
		subVec(&x[0], &y[0], &z[0], n)
	}
	for i := n; i < len(z); i++ {
		z[i] = x[i] - y[i]
	}
}

// Mul sets z[i] = x[i] * y[i] for i < len(z).
func Mul(x, y, z []float32) {
	x, y = x[:len(z)], y[:len(z)]
	n := vecLen(len(z))
	if n > 0 {
		mulVec(&x[0], &y[0], &z[0], n)
	}
	for i := n; i < len(z); i++ {
		z[i] = x[i] * y[i]
	}
}

// Sqrt sets y[i] = sqrt(x[i]) for i < len(y), correctly rounded (the
// float32 of the float64 square root, which the vector instruction equals).
func Sqrt(x, y []float32) {
	x = x[:len(y)]
	n := vecLen(len(y))
	if n > 0 {
		sqrtVec(&x[0], &y[0], n)
	}
	for i := n; i < len(y); i++ {
		y[i] = float32(math.Sqrt(float64(x[i])))
	}
}

// Scale sets y[i] = a*x[i] + b for i < len(y).
func Scale(a, b float32, x, y []float32) {
	x = x[:len(y)]
	n := vecLen(len(y))
	if n > 0 {
		scaleVec(a, b, &x[0], &y[0], n)
	}
	for i := n; i < len(y); i++ {
		y[i] = a*x[i] + b
	}
}
