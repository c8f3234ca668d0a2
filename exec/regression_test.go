package exec

import (
	"bufio"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// leastSquares reads testdata/regression/linear.csv without psgraph's
// loader and solves the normal equations for y ~ x W + b: the closed form
// the trained parameters must reach.
func leastSquares(t *testing.T, path string) (w [3]float64, b float64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var a [4][5]float64 // [X 1]^T [X 1] | [X 1]^T y
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		parts := strings.Split(sc.Text(), ",")
		var row [5]float64
		for i, p := range parts {
			v, err := strconv.ParseFloat(p, 64)
			if err != nil {
				t.Fatal(err)
			}
			row[i] = v
		}
		x := [4]float64{row[0], row[1], row[2], 1}
		for i := range 4 {
			for j := range 4 {
				a[i][j] += x[i] * x[j]
			}
			a[i][4] += x[i] * row[3]
		}
	}
	for c := range 4 { // Gauss-Jordan
		p := a[c][c]
		for j := range 5 {
			a[c][j] /= p
		}
		for r := range 4 {
			if r != c {
				k := a[r][c]
				for j := range 5 {
					a[r][j] -= k * a[c][j]
				}
			}
		}
	}
	return [3]float64{a[0][4], a[1][4], a[2][4]}, a[3][4]
}

// A float label (dtype: float32) trains a linear regression with mse: full
// batch gradient descent reaches the least-squares coefficients, which are
// near the generating ones (2, -3, 0.5; intercept 1).
func TestLinearRegressionRecoversCoefficients(t *testing.T) {
	const path = "../testdata/regression/linear.yaml"
	w, b := leastSquares(t, "../testdata/regression/linear.csv")
	for i, want := range []float64{2, -3, 0.5} {
		if math.Abs(w[i]-want) > 0.05 {
			t.Fatalf("closed form W[%d] = %g, far from the generating %g: the data file changed", i, w[i], want)
		}
	}
	sum, params := train(t, path, RunOptions{Role: "local"})
	for i := range 3 {
		if got := float64(params["W"].F[i]); math.Abs(got-w[i]) > 1e-4 {
			t.Errorf("W[%d] = %.6f, least squares %.6f", i, got, w[i])
		}
	}
	if got := float64(params["b"].F[0]); math.Abs(got-b) > 1e-4 {
		t.Errorf("b = %.6f, least squares %.6f", got, b)
	}
	// The residual is the noise: its mean square is about 0.1^2.
	if sum.Loss > 0.02 || sum.Loss < 0.005 {
		t.Errorf("final mse %g, want about 0.01 (the noise variance)", sum.Loss)
	}
}
