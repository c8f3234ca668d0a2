package job

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/psgraph/psgraph/exec/trainer"
)

// A model whose only parameter is a sharded table (the pservers serve a
// trainer no dense parameter) trains in a split job as it does locally.
// Its trainers receive no final parameters; compiling that receive for no
// target once compiled the whole step, whose run sent the pservers one
// more step of gradients (from unfilled ids: row 0) before the job ended.
func TestTableOnlyModelSplitEqualsLocalInmem(t *testing.T) {
	dir := t.TempDir()
	var file strings.Builder
	for i := range 64 {
		fmt.Fprintf(&file, "%d\t%d\n", (i*7)%3%2, i*40503%61)
	}
	if err := os.WriteFile(filepath.Join(dir, "d.tsv"), []byte(file.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(path, []byte(`psgraph: 1
data:
  csv: d.tsv
  delimiter: tab
  label: {name: y, column: 0, dtype: float32}
  ids: {name: id, column: 1, num_ids: 64}
params:
  wide: {shape: [64, 1], init: {type: normal, std: 0.1, seed: 1}}
ops:
  - {type: reshape, inputs: [id], outputs: [i1], attrs: {shape: [-1]}}
  - {type: lookup_table, inputs: [wide, i1], outputs: [logit]}
  - {type: sigmoid_cross_entropy, inputs: [logit, y], outputs: [loss]}
train: {loss: loss, batch: 8, steps: 6, optimizer: {type: sgd, lr: 0.5}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	g := load(t, path)
	for _, c := range []struct{ n, m int }{{1, 1}, {2, 2}} {
		t.Run(fmt.Sprintf("%dx%d", c.n, c.m), func(t *testing.T) {
			local := filepath.Join(t.TempDir(), "local.safetensors")
			if _, err := trainer.Train(context.Background(), g, trainer.RunOptions{Role: "local", Steps: 6, Batch: 8 * c.n, Save: local, Log: zerolog.Nop()}); err != nil {
				t.Fatal(err)
			}
			dist := runTableJob(t, g, c.n, c.m, false, trainer.RunOptions{Steps: 6, Batch: 8, Log: zerolog.Nop()})
			compareParams(t, local, dist, 1e-5)
		})
	}
}
