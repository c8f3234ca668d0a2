package viz_test

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/cmd/internal/viz"
)

func writeRun(t *testing.T, name, role string, lossAt func(int) float64) string {
	t.Helper()
	var b strings.Builder
	for s := 10; s <= 100; s += 10 {
		b.WriteString(`{"step":` + itoa(s) + `,"role":"` + role + `","loss":` + ftoa(lossAt(s)) + `,"acc":` + ftoa(float64(s)/100) + `,"steps_per_s":500}` + "\n")
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCurves(t *testing.T) {
	a := writeRun(t, "t0.jsonl", "trainer", func(s int) float64 { return 2 / float64(s) })
	b := writeRun(t, "t1.jsonl", "trainer", func(s int) float64 { return 3 / float64(s) })
	var runs []*viz.Run
	for _, f := range []string{a, b} {
		r, err := viz.ReadRun(f)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if got := strings.Join(runs[0].Names, ","); got != "loss,acc" {
		t.Fatalf("quantities %q, want loss,acc (steps_per_s is not plotted)", got)
	}
	if runs[0].Label != "t0 (trainer)" || len(runs[0].Steps) != 10 {
		t.Fatalf("run %q with %d steps", runs[0].Label, len(runs[0].Steps))
	}
	var pngBuf bytes.Buffer
	if err := viz.Curves(runs, "png", &pngBuf); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&pngBuf)
	if err != nil {
		t.Fatalf("the PNG does not decode: %v", err)
	}
	if got, want := img.Bounds().Size(), (struct{ X, Y int }{viz.CurveWidth, 2 * viz.CurvePanelHeight}); got.X != want.X || got.Y != want.Y {
		t.Errorf("PNG is %v, want %dx%d (two panels)", got, want.X, want.Y)
	}
	var svg bytes.Buffer
	if err := viz.Curves(runs, "svg", &svg); err != nil {
		t.Fatal(err)
	}
	parseXML(t, svg.Bytes())
	for _, want := range []string{"t0 (trainer)", "t1 (trainer)", "step", "loss", "acc"} {
		if !bytes.Contains(svg.Bytes(), []byte(">"+want+"<")) {
			t.Errorf("SVG lacks the text %q (legend or axis label)", want)
		}
	}
}

func TestReadRunErrors(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{
		"garbage.jsonl": "not json\n",
		"nostep.jsonl":  `{"loss":1}` + "\n",
		"empty.jsonl":   "",
	}
	want := map[string]string{
		"garbage.jsonl": "garbage.jsonl:1: not a metrics line",
		"nostep.jsonl":  `nostep.jsonl:1: the line has no numeric "step"`,
		"empty.jsonl":   "empty.jsonl: no metrics lines",
	}
	for name, content := range cases {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), 0o644)
		_, err := viz.ReadRun(p)
		if err == nil || !strings.Contains(err.Error(), want[name]) {
			t.Errorf("%s: error %v, want %q", name, err, want[name])
		}
	}
	if _, err := viz.ReadRun(filepath.Join(dir, "missing.jsonl")); err == nil || !strings.Contains(err.Error(), "cannot read the metrics file") {
		t.Errorf("missing file: %v", err)
	}
}

func itoa(i int) string     { return strconv.Itoa(i) }
func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// The eval_* lines of train.eval_every become their own quantities: a
// value at each evaluated step, NaN (no point) at the others, and the
// train lines' loss NaN at an evaluation-only step.
func TestReadRunEvalLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "run.jsonl")
	lines := `{"step":10,"role":"local","loss":1.5,"acc":0.5,"steps_per_s":100}
{"step":20,"role":"local","loss":1.0,"acc":0.7,"steps_per_s":100}
{"step":20,"role":"local","eval_loss":1.2,"eval_acc":0.6}
{"step":30,"role":"local","loss":0.8,"acc":0.8,"steps_per_s":100}
`
	if err := os.WriteFile(p, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := viz.ReadRun(p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(r.Names, ",") != "loss,acc,eval_loss,eval_acc" || len(r.Steps) != 4 {
		t.Fatalf("names %v, %d steps", r.Names, len(r.Steps))
	}
	ev, loss := r.Values["eval_loss"], r.Values["loss"]
	if !math.IsNaN(ev[0]) || !math.IsNaN(ev[1]) || ev[2] != 1.2 || !math.IsNaN(ev[3]) || !math.IsNaN(loss[2]) || loss[3] != 0.8 {
		t.Fatalf("eval_loss %v, loss %v", ev, loss)
	}
	var svg bytes.Buffer
	if err := viz.Curves([]*viz.Run{r}, "svg", &svg); err != nil || !strings.Contains(svg.String(), "eval_acc") {
		t.Fatalf("curves: %v", err)
	}
}
