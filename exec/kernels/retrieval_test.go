package kernels_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/modelfile"
)

// recall_at_k against torch (testdata/retrieval/gen_reference.py): on
// in-batch scores and on scores against other candidates, torch.topk's
// indices; with ties and NaNs, the documented rule (a tie does not push
// the label out, a NaN at the label misses).
func TestRecallAtKMatchesTorch(t *testing.T) {
	const file = "../../testdata/retrieval/reference.safetensors"
	ref, meta, err := modelfile.LoadSafetensors(file)
	if err != nil {
		t.Fatal(err)
	}
	var cases []torchCase
	if err := json.Unmarshal([]byte(meta["cases"]), &cases); err != nil || len(cases) == 0 {
		t.Fatalf("%s: no cases in the metadata (%v)", file, err)
	}
	seen := map[float32]bool{}
	for _, c := range cases {
		seen[ref[c.Name+".out0"].F[0]] = true
		t.Run(c.Name, func(t *testing.T) { runTorchCase(t, c, ref) })
	}
	if len(seen) < 4 {
		t.Fatalf("the references take %d distinct values; the cases would not discriminate", len(seen))
	}
}

// A label outside the scores' columns stops the run naming the op and the
// row; k below 1, and candidate ids that are not one per column, are
// refused when the model is loaded.
func TestRecallAtKRefusesBadLabelsAndK(t *testing.T) {
	model := func(k int) string {
		return fmt.Sprintf(`psgraph: 1
state:
  s: {shape: [3, 4]}
  y: {shape: [3], dtype: int32}
ops:
  - {type: recall_at_k, inputs: [s, y], outputs: [r], attrs: {k: %d}}
`, k)
	}
	for _, bad := range []int32{4, -1} {
		p := compileModel(t, model(2), 1)
		copy(p.Scope["y"].I, []int32{0, bad, 1})
		err := runOnce(t, p)
		if err == nil {
			t.Fatalf("label %d: no error", bad)
		}
		for _, want := range []string{"op recall_at_k", fmt.Sprintf("label %d in batch row 1", bad), "outside [0, 4)"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("label %d: error %q does not mention %q", bad, err, want)
			}
		}
	}
	_, err := dsl.LoadBytes(filepath.Join(t.TempDir(), "m.yaml"), []byte(model(0)))
	if err == nil || !strings.Contains(err.Error(), "k is 0; it must be 1 or more") {
		t.Errorf("k: 0 gave %v", err)
	}
	ids := strings.Replace(model(2), "inputs: [s, y]", "inputs: [s, y, y]", 1)
	_, err = dsl.LoadBytes(filepath.Join(t.TempDir(), "m.yaml"), []byte(ids))
	if err == nil || !strings.Contains(err.Error(), "ids must be int32 [candidates] or [candidates, 1], one id per column of the scores [3, 4]") {
		t.Errorf("3 ids for 4 columns gave %v", err)
	}
}
