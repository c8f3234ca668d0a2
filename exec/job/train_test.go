package job

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/trainer"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/tensor"
)

func load(t testing.TB, path string) *dsl.Graph {
	t.Helper()
	g, err := dsl.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func train(t testing.TB, path string, opt trainer.RunOptions) (*trainer.Summary, map[string]*tensor.Tensor) {
	t.Helper()
	if opt.Save == "" {
		opt.Save = filepath.Join(t.TempDir(), "params.safetensors")
	}
	opt.Log = zerolog.Nop()
	sum, err := trainer.Train(context.Background(), load(t, path), opt)
	if err != nil {
		t.Fatal(err)
	}
	params, _, err := modelfile.LoadSafetensors(opt.Save)
	if err != nil {
		t.Fatal(err)
	}
	return sum, params
}

// relDiff is ||a-b|| / ||b||.
func relDiff(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i] - b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / math.Max(den, 1e-30))
}

// The built-in optimizers, expanded from their DSL templates, give the
// parameters torch.optim gives from the same initial parameters and data
// (testdata/optim/gen_reference.py wrote the references): plain, with
// weight decay (torch's coupled weight_decay) and as AdamW.
func TestOptimizersMatchTorch(t *testing.T) {
	matchTorch(t, "sgd", "momentum", "adagrad", "adam", "sgd-wd", "momentum-wd", "adagrad-wd", "adam-wd", "adamw")
}

// The built-in learning-rate schedules give the parameters torch.optim
// gives with torch.optim.lr_scheduler's CosineAnnealingLR (eta_min),
// StepLR, ExponentialLR, LinearLR (the warmup) and a LambdaLR of warmup
// times cosine, stepped after every optimizer step.
func TestSchedulesMatchTorch(t *testing.T) {
	matchTorch(t, "sgd-cosine", "momentum-step", "adagrad-exponential", "adam-warmup-cosine", "sgd-warmup")
}

// train.clip gives the parameters torch gives with
// torch.nn.utils.clip_grad_value_ and clip_grad_norm_ (with adam's weight
// decay added after clipping, as torch.optim does).
func TestClippingMatchesTorch(t *testing.T) {
	matchTorch(t, "sgd-clip-value", "adam-clip-norm")
}

// matchTorch trains each config of testdata/optim and compares with its
// torch reference. A variant's reference differs from its base's (the
// config without the feature) by far more than the tolerance, so the
// comparison shows the feature is applied: by 0.9e-2 (sgd-warmup) to 0.66
// (momentum-wd) relative difference on the least moved parameter.
func matchTorch(t *testing.T, configs ...string) {
	base := map[string]string{"sgd-wd": "sgd", "momentum-wd": "momentum", "adagrad-wd": "adagrad", "adam-wd": "adam", "adamw": "adam-wd",
		"sgd-cosine": "sgd", "momentum-step": "momentum", "adagrad-exponential": "adagrad", "adam-warmup-cosine": "adam", "sgd-warmup": "sgd",
		"sgd-clip-value": "sgd", "adam-clip-norm": "adam-wd"}
	for _, name := range configs {
		if b, ok := base[name]; ok {
			ref, _, err1 := modelfile.LoadSafetensors("../../testdata/optim/" + name + ".safetensors")
			other, _, err2 := modelfile.LoadSafetensors("../../testdata/optim/" + b + ".safetensors")
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			for p := range ref {
				if d := relDiff(other[p].F, ref[p].F); d < 5e-3 {
					t.Fatalf("%s: the reference of %s is within %.1e of %s's; the test would not discriminate", p, name, d, b)
				}
			}
		}
		t.Run(name, func(t *testing.T) {
			_, got := train(t, "../../testdata/optim/mlp-"+name+".yaml", trainer.RunOptions{Role: "local", InitFrom: "../../testdata/optim/init.safetensors"})
			want, _, err := modelfile.LoadSafetensors("../../testdata/optim/" + name + ".safetensors")
			if err != nil {
				t.Fatal(err)
			}
			init, _, _ := modelfile.LoadSafetensors("../../testdata/optim/init.safetensors")
			for p, w := range want {
				g := got[p]
				if g == nil || !g.Shape.Equal(w.Shape) {
					t.Fatalf("%s: got %v, want shape %v", p, g, w.Shape)
				}
				if d := relDiff(g.F, w.F); d > 1e-3 {
					t.Errorf("%s: relative difference to torch.optim %.2e > 1e-3", p, d)
				}
				if relDiff(init[p].F, w.F) < 1e-2 {
					t.Fatalf("%s: reference barely moved from init; the test would not discriminate", p)
				}
			}
		})
	}
}

// A momentum optimizer written by hand in the model file is the built-in one.
func TestUserDefinedMomentumEqualsBuiltin(t *testing.T) {
	opt := trainer.RunOptions{Role: "local", InitFrom: "../../testdata/optim/init.safetensors"}
	_, custom := train(t, "../../testdata/optim/mlp-custom-momentum.yaml", opt)
	_, builtin := train(t, "../../testdata/optim/mlp-momentum.yaml", opt)
	for p, b := range builtin {
		for i := range b.F {
			if custom[p].F[i] != b.F[i] {
				t.Fatalf("%s[%d]: custom %v, built-in %v", p, i, custom[p].F[i], b.F[i])
			}
		}
	}
}

// A warmup written by hand with $step in a user-defined optimizer is the
// built-in sgd with lr: {schedule: constant, warmup: 10}, bit for bit (and
// that one matches torch's LinearLR: TestSchedulesMatchTorch).
func TestStepInTemplateEqualsScheduleSugar(t *testing.T) {
	opt := trainer.RunOptions{Role: "local", InitFrom: "../../testdata/optim/init.safetensors"}
	_, custom := train(t, "../../testdata/optim/mlp-custom-warmup.yaml", opt)
	_, sugar := train(t, "../../testdata/optim/mlp-sgd-warmup.yaml", opt)
	for p, b := range sugar {
		for i := range b.F {
			if custom[p].F[i] != b.F[i] {
				t.Fatalf("%s[%d]: by hand %v, schedule %v", p, i, custom[p].F[i], b.F[i])
			}
		}
	}
}

func TestDigitsReachesAccuracy(t *testing.T) {
	save := filepath.Join(t.TempDir(), "digits.safetensors")
	sum, params := train(t, "../../examples/digits-mlp.yaml", trainer.RunOptions{Role: "local", Save: save})
	if sum.Steps != 1000 || sum.Metrics["acc"] < 0.97 {
		t.Fatalf("digits: %d steps, accuracy %.4f; want 1000 steps and >= 0.97", sum.Steps, sum.Metrics["acc"])
	}
	if len(params) != 4 || !params["W1"].Shape.Equal(tensor.Shape{64, 128}) {
		t.Fatalf("saved params: %v", params)
	}
	checkSafetensorsLayout(t, save, params)
	checkNumpyReads(t, save, params)
}

func TestIrisTrains(t *testing.T) {
	sum, _ := train(t, "../../examples/iris.yaml", trainer.RunOptions{Role: "local"})
	if sum.Metrics["acc"] < 0.95 {
		t.Fatalf("iris accuracy %.3f < 0.95", sum.Metrics["acc"])
	}
}

// checkSafetensorsLayout reads the file by the format's definition,
// independently of LoadSafetensors.
func checkSafetensorsLayout(t *testing.T, path string, params map[string]*tensor.Tensor) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(raw)
	var header map[string]struct {
		DType   string `json:"dtype"`
		Shape   []int  `json:"shape"`
		Offsets []int  `json:"data_offsets"`
	}
	if err := json.Unmarshal(raw[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	body := raw[8+n:]
	for name, p := range params {
		e := header[name]
		if e.DType != "F32" || !tensor.Shape(e.Shape).Equal(p.Shape) {
			t.Fatalf("%s: header %+v", name, e)
		}
		first := math.Float32frombits(binary.LittleEndian.Uint32(body[e.Offsets[0]:]))
		if first != p.F[0] {
			t.Fatalf("%s: first element %v, want %v", name, first, p.F[0])
		}
	}
}

// checkNumpyReads loads the file with a plain numpy reader where numpy is installed.
func checkNumpyReads(t *testing.T, path string, params map[string]*tensor.Tensor) {
	py := "/usr/bin/python3"
	if exec.Command(py, "-c", "import numpy").Run() != nil {
		t.Log("numpy not installed; skipping the numpy reader check")
		return
	}
	script := `
import json, struct, sys, numpy as np
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8+n])
w = h['W2']; s, e = w['data_offsets']
a = np.frombuffer(b[8+n+s:8+n+e], dtype='<f4').reshape(w['shape'])
print(json.dumps([a.shape[0], a.shape[1], float(a[3, 7])]))`
	out, err := exec.Command(py, "-c", script, path).Output()
	if err != nil {
		t.Fatalf("numpy reader: %v", err)
	}
	var got []float64
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if got[0] != 128 || got[1] != 10 || float32(got[2]) != params["W2"].F[3*10+7] {
		t.Fatalf("numpy read %v, want [128 10 %v]", got, params["W2"].F[37])
	}
}

func TestInitFromMismatch(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.safetensors")
	if err := modelfile.SaveSafetensors(bad, map[string]*tensor.Tensor{"W1": tensor.New(tensor.F32, tensor.Shape{4, 4})}, nil); err != nil {
		t.Fatal(err)
	}
	g := load(t, "../../testdata/optim/mlp-sgd.yaml")
	_, err := trainer.Train(context.Background(), g, trainer.RunOptions{InitFrom: bad, Steps: 1, Log: zerolog.Nop()})
	if err == nil || !strings.Contains(err.Error(), `"W1" is float32[4, 4] in the file but float32[4, 16]`) {
		t.Fatalf("err = %v", err)
	}
	unknown := filepath.Join(dir, "unknown.safetensors")
	modelfile.SaveSafetensors(unknown, map[string]*tensor.Tensor{"W9": tensor.New(tensor.F32, tensor.Shape{1})}, nil)
	_, err = trainer.Train(context.Background(), g, trainer.RunOptions{InitFrom: unknown, Steps: 1, Log: zerolog.Nop()})
	if err == nil || !strings.Contains(err.Error(), "[W9] are not parameters") {
		t.Fatalf("err = %v", err)
	}
}
