package cmd_test

import (
	"strings"
	"testing"
)

// check names each parameter's own optimizer (params.W1.optimizer) after
// train.optimizer, with the state each gets; row-wise adagrad's state of
// one value per row shows with its shape.
func TestCheckListsParameterOptimizers(t *testing.T) {
	t.Parallel()
	r := psgraph(t, "check", "testdata/optim/mlp-mixed.yaml")
	if r.code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{
		"optimize ops (generated), optimizer adam (beta1=0.9, beta2=0.999, eps=1e-08, lr=0.01), W1: ftrl (beta=0.1, initial_accumulator_value=0.1, l1=0.001, l2=0.01, lr=0.5, lr_power=-0.5), W2: ftrl (",
		"W1@accumulator", "b1@m",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("check output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = psgraph(t, "check", "testdata/sparse/cancel-rowwise_adagrad.yaml")
	if r.code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", r.code, r.stderr)
	}
	if want := "emb@sum float32[50, 1]"; !strings.Contains(r.stdout, want) {
		t.Errorf("check output lacks %q:\n%s", want, r.stdout)
	}
}
