package viz

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Run is the content of one --metrics file: per quantity (loss and each
// metric), the values at the logged steps.
type Run struct {
	// Label names the run in the legend: the file name and its role.
	Label string
	// Names lists the quantities in file order, loss first.
	Names  []string
	Steps  []float64
	Values map[string][]float64
}

// ReadRun reads a --metrics JSONL file ({"step","role","loss",<metrics>,"steps_per_s"}
// per line, and {"step","role","eval_loss",<eval_metrics>} at each held-out evaluation).
func ReadRun(path string) (*Run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read the metrics file: %w (write one with psgraph run --metrics %s)", path, err, path)
	}
	defer f.Close()
	r := &Run{Values: map[string][]float64{}}
	role := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	line := 0
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(text))
		dec.UseNumber()
		keys, obj, err := decodeOrdered(dec)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: not a metrics line: %v (expected one JSON object per line, as psgraph run --metrics writes)", path, line, err)
		}
		step, ok := number(obj["step"])
		if !ok {
			return nil, fmt.Errorf(`%s:%d: the line has no numeric "step"; is this a psgraph run --metrics file?`, path, line)
		}
		if s, ok := obj["role"].(string); ok {
			role = s
		}
		// A name first seen on a later line (eval_* lines come at
		// train.eval_every) gets NaN, no point, at the steps before.
		for _, k := range keys {
			if k == "step" || k == "role" || k == "steps_per_s" || r.Values[k] != nil {
				continue
			}
			if _, ok := number(obj[k]); ok {
				r.Names = append(r.Names, k)
				r.Values[k] = make([]float64, len(r.Steps), len(r.Steps)+1)
				for i := range r.Values[k] {
					r.Values[k][i] = math.NaN()
				}
			}
		}
		if len(r.Names) == 0 {
			return nil, fmt.Errorf("%s:%d: the line holds no loss or metric values", path, line)
		}
		r.Steps = append(r.Steps, step)
		for _, n := range r.Names {
			v, ok := number(obj[n])
			if !ok {
				v = math.NaN()
			}
			r.Values[n] = append(r.Values[n], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(r.Steps) == 0 {
		return nil, fmt.Errorf("%s: no metrics lines; run with --metrics %s and a --log-every small enough to log", path, path)
	}
	r.Label = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	if role != "" {
		r.Label += " (" + role + ")"
	}
	return r, nil
}

// decodeOrdered decodes one JSON object, keeping its key order.
func decodeOrdered(dec *json.Decoder) ([]string, map[string]any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, fmt.Errorf("not an object")
	}
	var keys []string
	obj := map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		k, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		keys = append(keys, k)
		obj[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, err
	}
	return keys, obj, nil
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case string: // jsonNum writes NaN and infinities as strings
		switch x {
		case "NaN":
			return math.NaN(), true
		case "+Inf", "Inf":
			return math.Inf(1), true
		case "-Inf":
			return math.Inf(-1), true
		}
	}
	return 0, false
}

// Curve sizes, in pixels at 96 dpi: one panel per quantity, stacked.
const (
	CurveWidth       = 800
	CurvePanelHeight = 300
	curveDPI         = 96
)

// Curves draws loss and every metric against step, one panel per quantity
// and one line per run, as "png" or "svg". The image is CurveWidth pixels
// wide and CurvePanelHeight per panel high.
func Curves(runs []*Run, format string, w io.Writer) error {
	if len(runs) == 0 {
		return fmt.Errorf("no runs to plot")
	}
	var names []string
	seen := map[string]bool{}
	for _, r := range runs {
		for _, n := range r.Names {
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	// loss first, then the metrics in first-seen order
	sort.SliceStable(names, func(i, j int) bool { return names[i] == "loss" && names[j] != "loss" })
	var rows [][]*plot.Plot
	for _, n := range names {
		p := plot.New()
		p.Title.Text = n
		p.X.Label.Text = "step"
		p.Y.Label.Text = n
		p.Legend.Top = n == "loss"
		p.X.Tick.Marker = evenTicks{}
		p.Y.Tick.Marker = evenTicks{}
		if bounded(n) { // accuracy and AUC live in [0, 1]: show all of it
			p.Y.Min, p.Y.Max = 0, 1
		}
		p.Add(plotter.NewGrid())
		for i, r := range runs {
			vals, ok := r.Values[n]
			if !ok {
				continue
			}
			xy := make(plotter.XYs, 0, len(vals))
			for k, v := range vals {
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					xy = append(xy, plotter.XY{X: r.Steps[k], Y: v})
				}
			}
			if len(xy) == 0 {
				continue
			}
			l, err := plotter.NewLine(xy)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", r.Label, n, err)
			}
			l.Color = plotutil.Color(i)
			l.Width = vg.Points(1.5)
			l.Dashes = plotutil.Dashes(i / 7)
			p.Add(l)
			if len(rows) == 0 { // one legend, on the top panel
				p.Legend.Add(r.Label, l)
			}
		}
		rows = append(rows, []*plot.Plot{p})
	}
	width := vg.Length(CurveWidth) * vg.Inch / curveDPI
	height := vg.Length(CurvePanelHeight*len(rows)) * vg.Inch / curveDPI
	var c vg.CanvasSizer
	var out io.WriterTo
	switch format {
	case "png":
		img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(curveDPI), vgimg.UseBackgroundColor(color.White))
		c, out = img, vgimg.PngCanvas{Canvas: img}
	case "svg":
		s := vgsvg.New(width, height)
		c, out = s, s
	default:
		return fmt.Errorf("cannot plot curves as %q: use .png or .svg", format)
	}
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadY: vg.Points(8), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	_, err := out.WriteTo(w)
	return err
}

// bounded reports whether a quantity is a fraction in [0, 1] (accuracy,
// AUC, also as eval_*), whose axis then spans exactly that.
func bounded(name string) bool {
	switch strings.TrimPrefix(name, "eval_") {
	case "acc", "accuracy", "binary_accuracy", "bacc", "auc":
		return true
	}
	return false
}

// evenTicks labels an axis at evenly spaced round values: a step of 1, 2
// or 5 times a power of ten giving at most 7 labels, unlabeled minor ticks
// between them.
type evenTicks struct{}

func (evenTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return []plot.Tick{{Value: lo, Label: formatTick(lo, 1)}}
	}
	step := niceStep(hi - lo)
	var ticks []plot.Tick
	first := math.Ceil(lo/step-1e-9) * step
	for v := first; v <= hi+step*1e-9; v += step {
		v = math.Round(v/step) * step // no drift from repeated addition
		ticks = append(ticks, plot.Tick{Value: v, Label: formatTick(v, step)})
		if m := v + step/2; m < hi {
			ticks = append(ticks, plot.Tick{Value: m})
		}
	}
	return ticks
}

// niceStep is the smallest 1, 2 or 5 x 10^k step that cuts span into at
// most 6 parts.
func niceStep(span float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(span)))
	for _, m := range []float64{0.1, 0.2, 0.5, 1, 2, 5, 10} {
		if span/(m*p) <= 6 {
			return m * p
		}
	}
	return 10 * p
}

// formatTick writes v with as many decimals as the step needs.
func formatTick(v, step float64) string {
	if v == 0 {
		return "0"
	}
	d := 0
	if step < 1 {
		d = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	if math.Abs(v) >= 1e6 {
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
	return strconv.FormatFloat(v, 'f', d, 64)
}
