package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"
)

// vecValues is n test values from r: every kind of float32 a kernel must
// carry through (NaN, ±0, ±Inf, subnormals of both signs, the extremes),
// then random values of both signs and of every magnitude, then values of
// activation size, in an order that puts every kind in the vector body
// and in the tail.
func vecValues(r *rand.Rand, n int) []float32 {
	special := []float32{float32(math.NaN()), 0, negZero, float32(math.Inf(1)), float32(math.Inf(-1)),
		1e-40, -1e-40, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, math.MaxFloat32,
		-math.MaxFloat32, 1, -1, 0.5, -2, 1.1754944e-38, -1.1754944e-38,
		math.Float32frombits(0xffc00001)} // a NaN with the sign set
	x := make([]float32, n)
	for i := range x {
		switch k := r.IntN(4); {
		case k == 0:
			x[i] = special[r.IntN(len(special))]
		case k == 1:
			x[i] = math.Float32frombits(r.Uint32()) // any bit pattern
		default:
			x[i] = float32(r.NormFloat64() * 4)
		}
	}
	return x
}

var negZero = float32(math.Copysign(0, -1))

// vecLengths are the slice lengths the kernels are tested at: 0 to 40
// (every tail of every vector width), around 64 and 128, and long.
func vecLengths() []int {
	var ns []int
	for n := 0; n <= 40; n++ {
		ns = append(ns, n)
	}
	return append(ns, 63, 64, 65, 127, 128, 129, 1000, 1029)
}

// sameBits reports whether got is want bit for bit, or both are NaN.
func sameBits(got, want float32) bool {
	return math.Float32bits(got) == math.Float32bits(want) || (got != got && want != want)
}

// ulps is how many float32 steps got is from want (at want's magnitude),
// 0 when both are NaN or the same infinity, +Inf when only one is NaN.
func ulps(got, want float32) float64 {
	switch {
	case got != got || want != want:
		if got != got && want != want {
			return 0
		}
		return math.Inf(1)
	case got == want:
		return 0
	case math.IsInf(float64(want), 0) || math.IsInf(float64(got), 0):
		return math.Inf(1)
	}
	step := float64(math.Nextafter32(float32(math.Abs(float64(want))), float32(math.Inf(1))) - float32(math.Abs(float64(want))))
	return math.Abs(float64(got)-float64(want)) / step
}

// r32 rounds a float64 to float32: an operation on float32 operands done
// in float64 and rounded so is the correctly rounded float32 operation
// (53 >= 2 x 24 + 2 bits: the double rounding is innocuous), a reference
// independent of how the compiler evaluates float32 expressions.
func r32(v float64) float32 { return float32(v) }

type vecCase struct {
	name string
	// run calls the kernel on in (one to three inputs) into out.
	run func(in [][]float32, out []float32)
	ins int
	// check reports what is wrong with got for inputs at index i, or "".
	check func(in [][]float32, i int, got float32) string
}

func exact(want func(in [][]float32, i int) float32) func(in [][]float32, i int, got float32) string {
	return func(in [][]float32, i int, got float32) string {
		if w := want(in, i); !sameBits(got, w) {
			return fmt.Sprintf("want %v (%#x)", w, math.Float32bits(w))
		}
		return ""
	}
}

func within(maxULP float64, want func(in [][]float32, i int) float32) func(in [][]float32, i int, got float32) string {
	return func(in [][]float32, i int, got float32) string {
		if w := want(in, i); ulps(got, w) > maxULP {
			return fmt.Sprintf("want %v (%#x), %.1f ulp off", w, math.Float32bits(w), ulps(got, w))
		}
		return ""
	}
}

func f64(v float32) float64 { return float64(v) }

var vecCases = []vecCase{
	{"relu", func(in [][]float32, out []float32) { Relu(in[0], out) }, 1, exact(func(in [][]float32, i int) float32 {
		if in[0][i] < 0 {
			return 0
		}
		return in[0][i] // NaN and -0 too
	})},
	{"relu_grad", func(in [][]float32, out []float32) { ReluGrad(in[0], in[1], out) }, 2, exact(func(in [][]float32, i int) float32 {
		if in[1][i] > 0 {
			return in[0][i]
		}
		return 0
	})},
	{"add", func(in [][]float32, out []float32) { Add(in[0], in[1], out) }, 2,
		exact(func(in [][]float32, i int) float32 { return r32(f64(in[0][i]) + f64(in[1][i])) })},
	{"sub", func(in [][]float32, out []float32) { Sub(in[0], in[1], out) }, 2,
		exact(func(in [][]float32, i int) float32 { return r32(f64(in[0][i]) - f64(in[1][i])) })},
	{"mul", func(in [][]float32, out []float32) { Mul(in[0], in[1], out) }, 2,
		exact(func(in [][]float32, i int) float32 { return r32(f64(in[0][i]) * f64(in[1][i])) })},
	{"div", func(in [][]float32, out []float32) { Div(in[0], in[1], out) }, 2,
		exact(func(in [][]float32, i int) float32 { return r32(f64(in[0][i]) / f64(in[1][i])) })},
	{"div_by", func(in [][]float32, out []float32) { DivBy(in[0], 3, out) }, 1,
		exact(func(in [][]float32, i int) float32 { return r32(f64(in[0][i]) / 3) })},
	{"div_by_subnormal", func(in [][]float32, out []float32) { DivBy(in[0], -1e-40, out) }, 1,
		exact(func(in [][]float32, i int) float32 { return r32(f64(in[0][i]) / f64(-1e-40)) })},
	// a*x exact (a power of two): fused or not, one rounding.
	{"scale", func(in [][]float32, out []float32) { Scale(-0.25, 3, in[0], out) }, 1,
		exact(func(in [][]float32, i int) float32 { return r32(-0.25*f64(in[0][i]) + 3) })},
	{"scale_add", func(in [][]float32, out []float32) { Scale(1, -1.7, in[0], out) }, 1,
		exact(func(in [][]float32, i int) float32 { return r32(f64(in[0][i]) + f64(-1.7)) })},
	{"scale_mul", func(in [][]float32, out []float32) { Scale(0.3, negZero, in[0], out) }, 1,
		exact(func(in [][]float32, i int) float32 { return r32(f64(0.3) * f64(in[0][i])) })},
	// any a and b: within the product's rounding and the sum's.
	{"scale_any", func(in [][]float32, out []float32) { Scale(0.3, 1.7, in[0], out) }, 1,
		func(in [][]float32, i int, got float32) string {
			ax := f64(0.3) * f64(in[0][i])
			want := ax + f64(1.7)
			if math.IsNaN(want) || math.IsInf(want, 0) || math.Abs(want) > math.MaxFloat32/2 {
				if !sameBits(got, r32(want)) && !(math.Abs(want) > math.MaxFloat32/2 && ulps(got, r32(want)) <= 1) {
					return fmt.Sprintf("want %v", r32(want))
				}
				return ""
			}
			tol := 0.5*ulpOf(r32(ax)) + ulpOf(r32(want))
			if math.Abs(f64(got)-want) > tol {
				return fmt.Sprintf("want %v within %g", want, tol)
			}
			return ""
		}},
	{"sqrt", func(in [][]float32, out []float32) { Sqrt(in[0], out) }, 1,
		exact(func(in [][]float32, i int) float32 { return r32(math.Sqrt(f64(in[0][i]))) })},
	{"exp", func(in [][]float32, out []float32) { Exp(in[0], out) }, 1,
		within(2, func(in [][]float32, i int) float32 { return r32(math.Exp(f64(in[0][i]))) })},
	{"sigmoid", func(in [][]float32, out []float32) { Sigmoid(in[0], out) }, 1,
		within(3, func(in [][]float32, i int) float32 {
			x := f64(in[0][i])
			if x < 0 {
				return r32(math.Exp(x) / (1 + math.Exp(x)))
			}
			return r32(1 / (1 + math.Exp(-x)))
		})},
	{"sigmoid_grad", func(in [][]float32, out []float32) { SigmoidGrad(in[0], in[1], out) }, 2,
		exact(func(in [][]float32, i int) float32 {
			dy, y := f64(in[0][i]), f64(in[1][i])
			return r32(f64(r32(dy*y)) * f64(r32(1-y)))
		})},
	{"tanh", func(in [][]float32, out []float32) { Tanh(in[0], out) }, 1,
		within(3, func(in [][]float32, i int) float32 { return r32(math.Tanh(f64(in[0][i]))) })},
	{"tanh_grad", func(in [][]float32, out []float32) { TanhGrad(in[0], in[1], out) }, 2,
		exact(func(in [][]float32, i int) float32 {
			dy, y := f64(in[0][i]), f64(in[1][i])
			return r32(dy * f64(r32(1-f64(r32(y*y)))))
		})},
}

// ulpOf is the spacing of float32 values at v's magnitude.
func ulpOf(v float32) float64 {
	a := float32(math.Abs(f64(v)))
	return f64(math.Nextafter32(a, float32(math.Inf(1))) - a)
}

// Every element-wise kernel against its reference, on the path this
// build and CPU select (VecName; TestVecKernelsOnEveryPath runs the
// others): every length from 0 to 40 and longer ones, each at offsets 0
// to 3 into its slices (misaligned for the vector loads and stores), the
// special values among random ones, and nothing written past len(out).
func TestVecKernels(t *testing.T) {
	t.Logf("vector path %s (GEMM %s)", VecName(), Name())
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range vecCases {
		for _, n := range vecLengths() {
			for off := 0; off < 4; off++ {
				in := make([][]float32, c.ins)
				for k := range in {
					in[k] = vecValues(r, n+off+1)[off:] // one more than needed: must be ignored
				}
				if c.name == "sigmoid" || c.name == "tanh" || c.name == "exp" {
					// their inputs at the scale where they bend, too
					for i := range in[0] {
						if i%3 == 0 {
							in[0][i] = float32(r.NormFloat64() * 2)
						}
					}
				}
				buf := make([]float32, n+off+4)
				for i := range buf {
					buf[i] = 42
				}
				out := buf[off : off+n]
				c.run(in, out)
				for i, v := range out {
					if msg := c.check(in, i, v); msg != "" {
						args := make([]string, len(in))
						for k := range in {
							args[k] = fmt.Sprintf("%v (%#x)", in[k][i], math.Float32bits(in[k][i]))
						}
						t.Fatalf("%s: n=%d off=%d: [%d] of %s = %v (%#x); %s", c.name, n, off, i, strings.Join(args, ", "), v, math.Float32bits(v), msg)
					}
				}
				for i, v := range buf[off+n:] {
					if v != 42 {
						t.Fatalf("%s: n=%d off=%d: wrote %v past the end, at %d", c.name, n, off, v, off+n+i)
					}
				}
			}
		}
	}
}

// In place (out the same slice as an input) every kernel gives what it
// gives into a separate slice.
func TestVecKernelsInPlace(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range vecCases {
		for _, n := range []int{7, 33, 100} {
			for k := 0; k < c.ins; k++ {
				in := make([][]float32, c.ins)
				for j := range in {
					in[j] = vecValues(r, n)
				}
				want := make([]float32, n)
				c.run(in, want)
				in[k] = append([]float32(nil), in[k]...)
				c.run(in, in[k])
				for i := range want {
					if !sameBits(in[k][i], want[i]) {
						t.Fatalf("%s: n=%d, out = input %d: [%d] = %v, want %v", c.name, n, k, i, in[k][i], want[i])
					}
				}
			}
		}
	}
}

// The path GODEBUG selects is the path that runs: x/sys/cpu applies
// GODEBUG's cpu.* settings before the kernels choose (cpu.go's
// processOptions), so cpu.avx512f=off leaves an AVX-512 machine the AVX2
// bodies and cpu.avx2=off leaves the Go ones. The test binary runs itself
// under each setting and reads the path back.
func TestVecPathFollowsGODEBUG(t *testing.T) {
	if os.Getenv("BLAS_PRINT_PATH") != "" {
		fmt.Printf("path=%s gemm=%s\n", VecName(), Name())
		return
	}
	native := "go"
	if runtime.GOARCH == "amd64" && VecName() != "go" {
		switch {
		case cpu.X86.HasAVX512F:
			native = "avx512"
		case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
			native = "avx2"
		}
	}
	if VecName() != native && !strings.Contains(os.Getenv("GODEBUG"), "cpu.") {
		t.Fatalf("VecName() = %q on a CPU whose best path is %q", VecName(), native)
	}
	if runtime.GOARCH != "amd64" {
		return // the Go bodies alone, whatever GODEBUG says (and maybe under an emulator that cannot run a child)
	}
	avx2 := "go" // what cpu.avx512f=off leaves
	if native != "go" && cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		avx2 = "avx2"
	}
	for _, c := range []struct{ godebug, want string }{
		{"cpu.avx512f=off", avx2},
		{"cpu.avx512f=off,cpu.avx2=off", "go"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestVecPathFollowsGODEBUG$")
		cmd.Env = append(os.Environ(), "BLAS_PRINT_PATH=1", "GODEBUG="+c.godebug)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("GODEBUG=%s: %v\n%s", c.godebug, err, out)
		}
		if !strings.Contains(string(out), "path="+c.want+" ") {
			t.Errorf("GODEBUG=%s: %s, want path=%s", c.godebug, strings.TrimSpace(string(out)), c.want)
		}
	}
}

// The kernel tests again on every path this machine can run but the one
// it selects (the AVX2 bodies on an AVX-512 machine, the Go bodies on
// any), by GODEBUG in a run of this test binary: `go test ./exec/blas`
// alone tests all. (.ci/run also runs the package with -tags purego, the
// Go bodies as other architectures build them.)
func TestVecKernelsOnEveryPath(t *testing.T) {
	if os.Getenv("BLAS_SUBRUN") != "" || VecName() == "go" {
		t.Skipf("the %s path is this run's", VecName())
	}
	for _, godebug := range []string{"cpu.avx512f=off", "cpu.avx512f=off,cpu.avx2=off"} {
		cmd := exec.Command(os.Args[0], "-test.run=^(TestVecKernels|TestVecKernelsInPlace|TestExpSub|TestSqrtIsCorrectlyRounded|TestVecOps|TestSigmoidTanhDense|TestExpDense)$", "-test.v")
		cmd.Env = append(os.Environ(), "BLAS_SUBRUN=1", "GODEBUG="+godebug)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("GODEBUG=%s: %v\n%s", godebug, err, out)
		}
		if !strings.Contains(string(out), "vector path ") {
			t.Fatalf("GODEBUG=%s: the kernel tests did not run:\n%s", godebug, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "vector path ") {
				t.Logf("GODEBUG=%s: %s", godebug, strings.TrimSpace(line))
			}
		}
	}
}

// The SIMD bodies against plain loops, for lengths around the vector width.
func TestVecOps(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 33, 100, 1024, 1029} {
		x, y, dy := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range x {
			x[i], dy[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
		}
		x = append(x, 42) // beyond len(out): must be ignored
		out := make([]float32, n)
		Relu(x, out)
		for i := range out {
			if want := float32(math.Max(float64(x[i]), 0)); out[i] != want {
				t.Fatalf("n=%d: relu[%d] = %v, want %v", n, i, out[i], want)
			}
		}
		copy(y, out)
		ReluGrad(dy, y, out)
		for i := range out {
			want := float32(0)
			if y[i] > 0 {
				want = dy[i]
			}
			if out[i] != want {
				t.Fatalf("n=%d: relu_grad[%d] = %v, want %v", n, i, out[i], want)
			}
		}
	}
	for _, shape := range [][2]int{{7, 37}, {1, 5}, {256, 10}, {3, 2048}} {
		rows, n := shape[0], shape[1]
		x := make([]float32, rows*n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		y := make([]float32, n)
		SumRows(x, rows, y)
		for j := 0; j < n; j++ {
			var s float32
			for i := 0; i < rows; i++ {
				s = r32(f64(s) + f64(x[i*n+j]))
			}
			if y[j] != s {
				t.Fatalf("%dx%d: sum_rows[%d] = %v, want %v", rows, n, j, y[j], s)
			}
		}
	}
}

// Sqrt's vector body gives every value the float64 square root rounded to
// float32 gives, bit for bit: random values of every magnitude, 0, -0,
// +Inf, subnormals, and NaN for NaN and negatives.
func TestSqrtIsCorrectlyRounded(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), 1e-40, math.SmallestNonzeroFloat32, math.MaxFloat32, float32(math.NaN()), -1, -1e-30}
	for _, n := range []int{0, 1, 15, 16, 17, 33, 1029} {
		x := make([]float32, n)
		for i := range x {
			x[i] = math.Float32frombits(r.Uint32() &^ (1 << 31)) // every positive bit pattern
			if i < len(special) {
				x[i] = special[i]
			}
		}
		x = append(x, 42)
		y := make([]float32, n)
		Sqrt(x, y)
		for i := range y {
			want := float32(math.Sqrt(float64(x[i])))
			if math.Float32bits(y[i]) != math.Float32bits(want) && !(math.IsNaN(float64(want)) && math.IsNaN(float64(y[i]))) {
				t.Fatalf("n=%d: sqrt(%g) = %g (%#x), want %g (%#x)", n, x[i], y[i], math.Float32bits(y[i]), want, math.Float32bits(want))
			}
		}
	}
}

// Sigmoid and Tanh over every float32 from -20 to 20 in steps of 2^-12
// (their bends and both tails), within 3 ulp of the float64 functions.
func TestSigmoidTanhDense(t *testing.T) {
	var x []float32
	for v := -20.0; v <= 20; v += 1.0 / 4096 {
		x = append(x, float32(v))
	}
	x = append(x, -88, -90, -103, -104, -105, -200, 44, 45, 89, 90, 1e-20, -1e-20, 1e-40)
	y := make([]float32, len(x))
	worst := [2]float64{}
	Sigmoid(x, y)
	for i, v := range x {
		xv := f64(v)
		want := r32(1 / (1 + math.Exp(-xv)))
		if xv < 0 {
			want = r32(math.Exp(xv) / (1 + math.Exp(xv)))
		}
		if u := ulps(y[i], want); u > 3 {
			t.Fatalf("sigmoid(%v) = %v, want %v (%.1f ulp)", v, y[i], want, u)
		} else {
			worst[0] = max(worst[0], u)
		}
	}
	Tanh(x, y)
	for i, v := range x {
		want := r32(math.Tanh(f64(v)))
		if u := ulps(y[i], want); u > 3 {
			t.Fatalf("tanh(%v) = %v, want %v (%.1f ulp)", v, y[i], want, u)
		} else {
			worst[1] = max(worst[1], u)
		}
	}
	t.Logf("%s path: largest error sigmoid %.2f ulp, tanh %.2f ulp", VecName(), worst[0], worst[1])
}

// Exp over every float32 from -110 to 90 in steps of 2^-7 (normal results,
// subnormal ones below -87.34, 0 below -103.97, +Inf above 88.73), within
// 2 ulp of math.Exp.
func TestExpDense(t *testing.T) {
	var x []float32
	for v := -110.0; v <= 90; v += 1.0 / 128 {
		x = append(x, float32(v))
	}
	y := make([]float32, len(x))
	Exp(x, y)
	worst := 0.0
	for i, v := range x {
		want := r32(math.Exp(f64(v)))
		if u := ulps(y[i], want); u > 2 {
			t.Fatalf("exp(%v) = %v, want %v (%.1f ulp)", v, y[i], want, u)
		} else {
			worst = max(worst, u)
		}
	}
	t.Logf("%s path: largest error %.2f ulp", VecName(), worst)
}
