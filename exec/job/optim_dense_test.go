package job

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/trainer"
)

// FTRL and row-wise adagrad on dense parameters (the iris MLP of
// testdata/optim) give the parameters of the numpy references of
// testdata/optim/numpy_optim.py (TensorFlow's FTRL, FBGEMM's row-wise
// adagrad) fed with torch's gradients, within 1e-3: FTRL with l1, l2 and
// beta, with lr_power -0.7, and with an exponential schedule of its rate;
// row-wise adagrad per row of W1 and W2 and per element of b1 and b2,
// without and with weight decay (FBGEMM's L2 mode, g + wd*p); and
// mixed, params.W1.optimizer and params.W2.optimizer FTRL beside
// train.optimizer adam (torch.optim.Adam) on the biases.
func TestFtrlAndRowwiseAdagradMatchReferences(t *testing.T) {
	init, _, err := modelfile.LoadSafetensors("../../testdata/optim/init.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ftrl", "ftrl-power", "ftrl-exponential", "rowwise_adagrad", "rowwise_adagrad-wd", "mixed"} {
		t.Run(name, func(t *testing.T) {
			_, got := train(t, "../../testdata/optim/mlp-"+name+".yaml", trainer.RunOptions{Role: "local", InitFrom: "../../testdata/optim/init.safetensors"})
			want, _, err := modelfile.LoadSafetensors("../../testdata/optim/" + name + ".safetensors")
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"W1", "b1", "W2", "b2"} {
				g, w := got[p], want[p]
				if g == nil || !g.Shape.Equal(w.Shape) {
					t.Fatalf("%s: got %v, want shape %v", p, g, w.Shape)
				}
				m, l2 := maxRelDiff(g.F, w.F), relDiff(g.F, w.F)
				t.Logf("%s: largest element difference %.2e of the largest value, 2-norm relative difference %.2e", p, m, l2)
				if m > 1e-3 || l2 > 1e-3 {
					t.Errorf("%s: difference to the reference %.2e (largest element) and %.2e (2-norm) relative, want <= 1e-3", p, m, l2)
				}
				if relDiff(init[p].F, w.F) < 1e-2 {
					t.Fatalf("%s: reference barely moved from init; the test would not discriminate", p)
				}
			}
		})
	}
}

// Each variant's reference differs from its base's (and mixed's from both
// of its parts') by far more than the tolerance, so the comparisons show
// each feature is applied.
func TestFtrlAndRowwiseReferencesDiscriminate(t *testing.T) {
	pairs := [][2]string{{"ftrl", "ftrl-power"}, {"ftrl", "ftrl-exponential"}, {"mixed", "ftrl"}, {"mixed", "adam"}, {"rowwise_adagrad", "adagrad"}, {"rowwise_adagrad-wd", "rowwise_adagrad"}}
	for _, p := range pairs {
		a, _, err1 := modelfile.LoadSafetensors("../../testdata/optim/" + p[0] + ".safetensors")
		b, _, err2 := modelfile.LoadSafetensors("../../testdata/optim/" + p[1] + ".safetensors")
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		worst := 0.0
		for name := range a {
			worst = max(worst, relDiff(a[name].F, b[name].F))
		}
		if worst < 1e-2 {
			t.Errorf("%s and %s: references within %.1e; the tests would not tell them apart", p[0], p[1], worst)
		}
	}
}

// FTRL is element-wise with state of the parameter's shape, so a sync job
// cuts its parameters into row blocks (min block size 20) and streams
// their updates like adam's; row-wise adagrad's [rows, 1] accumulator
// keeps each matrix whole on one pserver. Either way, and with a
// parameter's own optimizer, the job equals local training.
func TestFtrlAndRowwiseAdagradSyncEqualsLocalInmem(t *testing.T) {
	for _, model := range []string{"ftrl", "ftrl-exponential", "rowwise_adagrad", "mixed"} {
		for _, c := range []struct{ n, m, minBlock int }{{2, 2, 0}, {2, 3, 20}} {
			t.Run(fmt.Sprintf("%s/%dx%d/block%d", model, c.n, c.m, c.minBlock), func(t *testing.T) {
				dir := t.TempDir()
				g, err := dsl.Load(filepath.Join("..", "..", "testdata", "optim", "mlp-"+model+".yaml"))
				if err != nil {
					t.Fatal(err)
				}
				init := filepath.Join("..", "..", "testdata", "optim", "init.safetensors")
				local := filepath.Join(dir, "local.safetensors")
				if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 40, Batch: 10 * c.n, InitFrom: init, Save: local, Log: zerolog.Nop()}); err != nil {
					t.Fatal(err)
				}
				dist := filepath.Join(dir, "dist.safetensors")
				minBlock := c.minBlock
				if model == "rowwise_adagrad" {
					minBlock = 0 // nothing to cut: runInmemJob insists a block size cuts something
				}
				runInmemJob(t, g, c.n, c.m, false, trainer.RunOptions{Steps: 40, Batch: 10, InitFrom: init, Save: dist, Log: zerolog.Nop()}, minBlock)
				compareParams(t, local, dist, 1e-4)
			})
		}
	}
}
