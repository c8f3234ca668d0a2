package viz

import (
	"math"
	"slices"
	"testing"
)

// Axis labels sit at evenly spaced round values (1, 2 or 5 x 10^k), at
// most 7 of them, each written with the decimals its step needs.
func TestEvenTicks(t *testing.T) {
	cases := []struct {
		lo, hi float64
		labels []string
	}{
		{1, 1000, []string{"200", "400", "600", "800", "1000"}},
		{0, 1, []string{"0", "0.2", "0.4", "0.6", "0.8", "1.0"}},
		{0.31, 2.47, []string{"0.5", "1.0", "1.5", "2.0"}},
		{1, 30000, []string{"5000", "10000", "15000", "20000", "25000", "30000"}},
	}
	for _, c := range cases {
		var labels []string
		var values []float64
		for _, tk := range (evenTicks{}).Ticks(c.lo, c.hi) {
			if tk.Label != "" {
				labels, values = append(labels, tk.Label), append(values, tk.Value)
			}
		}
		if !slices.Equal(labels, c.labels) {
			t.Errorf("[%g, %g]: labels %q, want %q", c.lo, c.hi, labels, c.labels)
		}
		for i := 2; i < len(values); i++ {
			if d, d0 := values[i]-values[i-1], values[1]-values[0]; math.Abs(d-d0) > 1e-9*d0 {
				t.Errorf("[%g, %g]: uneven spacing %v", c.lo, c.hi, values)
			}
		}
	}
	if got := (evenTicks{}).Ticks(5, 5); len(got) != 1 || got[0].Label != "5" {
		t.Errorf("an empty range: %v, want one label", got)
	}
}

// Accuracy and AUC, also evaluated, are fractions: their axis is [0, 1].
func TestBoundedMetrics(t *testing.T) {
	for name, want := range map[string]bool{"acc": true, "eval_acc": true, "auc": true, "loss": false, "eval_loss": false, "mse": false} {
		if bounded(name) != want {
			t.Errorf("bounded(%q) = %v, want %v", name, !want, want)
		}
	}
}
