package blas

// The element-wise kernels. Each runs its vector body (AVX-512, else
// AVX2+FMA on amd64) on the largest part of its slices the vector width
// divides and its Go body (vec_go.go) on the rest; without a vector path
// (other architectures, the purego build tag, an x86 CPU without AVX2 and
// FMA) the Go body does all. Every path gives the results the comments
// below state (TestVecKernels runs each on whichever path the build and
// the CPU select; .ci/run runs them on all three).

// VecName reports the vector path of the element-wise kernels: "avx512"
// (AVX-512 bodies where a kernel has one, AVX2 bodies for the others),
// "avx2" (AVX2+FMA bodies) or "go" (the Go bodies alone).
func VecName() string { return vecName() }

// Relu sets y[i] = max(x[i], 0) for i < len(y): y = x wherever x < 0 is
// false, so NaN stays NaN and -0 stays -0.
func Relu(x, y []float32) {
	x = x[:len(y)]
	i := reluVec(x, y)
	reluGo(x[i:], y[i:])
}

// ReluGrad sets dx[i] = dy[i] where y[i] > 0, else +0 (NaN y included).
func ReluGrad(dy, y, dx []float32) {
	dy, y = dy[:len(dx)], y[:len(dx)]
	i := reluGradVec(dy, y, dx)
	reluGradGo(dy[i:], y[i:], dx[i:])
}

// Add sets z[i] = x[i] + y[i] for i < len(z).
func Add(x, y, z []float32) {
	x, y = x[:len(z)], y[:len(z)]
	i := addVec(x, y, z)
	addGo(x[i:], y[i:], z[i:])
}

// SumRows adds the rows of x (rows x n, row-major) into y (n): a column
// sum, the rows added in order.
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
	i := subVec(x, y, z)
	subGo(x[i:], y[i:], z[i:])
}

// Mul sets z[i] = x[i] * y[i] for i < len(z).
func Mul(x, y, z []float32) {
	x, y = x[:len(z)], y[:len(z)]
	i := mulVec(x, y, z)
	mulGo(x[i:], y[i:], z[i:])
}

// Div sets z[i] = x[i] / y[i] for i < len(z), correctly rounded.
func Div(x, y, z []float32) {
	x, y = x[:len(z)], y[:len(z)]
	i := divVec(x, y, z)
	divGo(x[i:], y[i:], z[i:])
}

// DivBy sets y[i] = x[i] / s for i < len(y), correctly rounded (not x
// times 1/s, which can differ in the last bit).
func DivBy(x []float32, s float32, y []float32) {
	x = x[:len(y)]
	i := divByVec(s, x, y)
	divByGo(s, x[i:], y[i:])
}

// Scale sets y[i] = a*x[i] + b for i < len(y). The vector bodies round
// a*x + b once (a fused multiply-add), the Go body rounds a*x and then the
// sum unless the compiler fuses them (arm64 does): the paths agree bit for
// bit where a*x is exact (a = ±1 or a power of two, or b = 0 with a
// negative-zero b: Scale(a, -0, ...) is a*x exactly, and Scale(1, b, ...)
// is x + b).
func Scale(a, b float32, x, y []float32) {
	x = x[:len(y)]
	i := scaleVec(a, b, x, y)
	scaleGo(a, b, x[i:], y[i:])
}

// Sqrt sets y[i] = sqrt(x[i]) for i < len(y), correctly rounded (the
// float32 of the float64 square root, which the vector instructions equal).
func Sqrt(x, y []float32) {
	x = x[:len(y)]
	i := sqrtVec(x, y)
	sqrtGo(x[i:], y[i:])
}

// Exp sets y[i] = exp(x[i]) for i < len(y), within 2 ulp of math.Exp
// rounded (TestVecKernels): ExpSub's exp over float32's whole range, to
// subnormals and 0 below (-Inf gives 0) and +Inf above 88.73. NaN stays
// NaN.
func Exp(x, y []float32) {
	x = x[:len(y)]
	i := expVec(x, y)
	expGo(x[i:], y[i:])
}

// Sigmoid sets y[i] = 1 / (1 + exp(-x[i])) for i < len(y), within 3 ulp
// of the float64 value rounded (TestVecKernels): exp(-|x|) as ExpSub's
// exp, then e / (1 + e) for negative x and 1 / (1 + e) for the others,
// so neither tail loses digits (sigmoid(-100) is 3.7e-44, a subnormal,
// not 0). NaN stays NaN.
func Sigmoid(x, y []float32) {
	x = x[:len(y)]
	i := sigmoidVec(x, y)
	sigmoidGo(x[i:], y[i:])
}

// SigmoidGrad sets dx[i] = dy[i] * y[i] * (1 - y[i]), each product and
// the difference rounded (no fused multiply-add on any path).
func SigmoidGrad(dy, y, dx []float32) {
	dy, y = dy[:len(dx)], y[:len(dx)]
	i := sigmoidGradVec(dy, y, dx)
	sigmoidGradGo(dy[i:], y[i:], dx[i:])
}

// Tanh sets y[i] = tanh(x[i]) for i < len(y), within 3 ulp of math.Tanh
// rounded (TestVecKernels): Cephes' tanhf, an odd polynomial below
// |x| = 0.625 and 1 - 2 / (exp(2|x|) + 1) with x's sign above. ±0 and NaN
// stay as they are.
func Tanh(x, y []float32) {
	x = x[:len(y)]
	i := tanhVec(x, y)
	tanhGo(x[i:], y[i:])
}

// TanhGrad sets dx[i] = dy[i] * (1 - y[i]*y[i]), each product and the
// difference rounded (no fused multiply-add on any path).
func TanhGrad(dy, y, dx []float32) {
	dy, y = dy[:len(dx)], y[:len(dx)]
	i := tanhGradVec(dy, y, dx)
	tanhGradGo(dy[i:], y[i:], dx[i:])
}
