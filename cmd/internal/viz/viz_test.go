package viz_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"flag"
	"fmt"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/cmd/internal/viz"
	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/partition"
)

var update = flag.Bool("update", false, "rewrite testdata/*.dot")

func digits(t *testing.T) *dsl.Graph {
	t.Helper()
	g, err := dsl.Load("../../../examples/digits-mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func digitsPlan(t *testing.T, trainers, pservers, minBlock int) *partition.Plan {
	t.Helper()
	opt := partition.Options{Trainers: trainers, PServers: pservers, Mode: partition.Sync, MinBlockSize: minBlock}
	p, err := partition.Split(digits(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/internal/viz -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output; check it and rerun with -update:\n%s", path, got)
	}
}

func TestGolden(t *testing.T) {
	cases := []struct {
		name string
		dot  func() []byte
	}{
		{"digits-model.dot", func() []byte { return viz.Model(digits(t), viz.Options{}) }},
		{"digits-model-collapsed.dot", func() []byte { return viz.Model(digits(t), viz.Options{CollapseBackward: true}) }},
		{"digits-plan-2x2.dot", func() []byte { return viz.Plan(digitsPlan(t, 2, 2, partition.DefaultMinBlockSize), viz.Options{}) }},
		{"digits-plan-cut-comm.dot", func() []byte { return viz.Plan(digitsPlan(t, 2, 3, 1000), viz.Options{CommOnly: true}) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.dot()
			if again := c.dot(); !bytes.Equal(got, again) {
				t.Fatal("two drawings of the same graph differ")
			}
			golden(t, c.name, got)
			checkDot(t, got)
			svg, err := viz.RenderSVG(context.Background(), got)
			if err != nil {
				t.Fatal(err)
			}
			parseXML(t, svg)
			checkPNG(t, got, svg)
		})
	}
}

// checkDot runs Graphviz's own dot on the text when it is installed.
func checkDot(t *testing.T, src []byte) {
	t.Helper()
	dot, err := exec.LookPath("dot")
	if err != nil {
		t.Log("dot not on PATH (apt-get install graphviz); only the in-process renderer checked the text")
		return
	}
	c := exec.Command(dot, "-Tsvg")
	c.Stdin = bytes.NewReader(src)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil || errb.Len() > 0 {
		t.Fatalf("dot -Tsvg: %v\n%s", err, errb.String())
	}
	parseXML(t, out.Bytes())
}

func parseXML(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	d.Strict = false // Graphviz writes a DOCTYPE
	sawSVG := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("output is not XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "svg" {
			sawSVG = true
		}
	}
	if !sawSVG {
		t.Fatal("no <svg> element")
	}
}

// Every transfer of the plan is one dashed edge between two clusters; the
// skeleton has one per direction between two nodes, listing its transfers.
func TestPlanDrawsEveryTransferOnce(t *testing.T) {
	for _, opt := range []viz.Options{{}, {CollapseBackward: true}, {CommOnly: true}} {
		p := digitsPlan(t, 2, 3, 1000)
		dot := string(viz.Plan(p, opt))
		want := len(p.Info.Transfers)
		if opt.CommOnly {
			want = 2 * p.Info.PServers // trainer to each pserver and back
		}
		if n := strings.Count(dot, "style=dashed"); n != want {
			t.Errorf("%+v: %d dashed edges, want %d", opt, n, want)
		}
		for _, tr := range p.Info.Transfers {
			if !regexp.MustCompile(`\[label="([^"]*, )?` + regexp.QuoteMeta(tr.Var) + `[ ,\\]`).MatchString(dot) {
				t.Errorf("%+v: no edge label names %s", opt, tr.Var)
			}
		}
		if !strings.Contains(dot, "rows [0, 22) of W1") {
			t.Errorf("%+v: the cut W1's blocks do not show their rows", opt)
		}
	}
}

// A plan of sharded lookup tables: each table transfer (ids up, rows down,
// row gradients up) is one dashed edge between the ops that move it.
func TestPlanDrawsTableTransfers(t *testing.T) {
	g, err := dsl.Load("../../../partition/testdata/split/tables-2x3/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		separate bool
		want     []string
	}{
		{true, []string{`emb@ids [32]`, `emb@rows [32, 8]`, `item@GRAD [16, 8]`, "rows 2, 5, ... (mod 3) of emb", `fetch_rows emb\nby id from 3 shards`}},
		// Bundled (partition/bundle.go): both tables' ids, rows and row
		// gradients in one transfer per pserver and direction.
		{false, []string{`tables@bundle@ids [50]`, `tables@bundle@rows [384]`, `tables@bundle@GRAD [434]`, "rows 2, 5, ... (mod 3) of emb", `fetch_tables emb, item\nby id from 3 shards`, `serve_tables emb.s0, item.s0\nto 2 fetches`}},
	} {
		p, err := partition.Split(g, partition.Options{Trainers: 2, PServers: 3, SeparateTables: c.separate})
		if err != nil {
			t.Fatal(err)
		}
		dot := string(viz.Plan(p, viz.Options{}))
		if n, want := strings.Count(dot, "style=dashed"), len(p.Info.Transfers); n != want {
			t.Errorf("separate tables %v: %d dashed edges, want %d (one per transfer)", c.separate, n, want)
		}
		for _, want := range c.want {
			if !strings.Contains(dot, want) {
				t.Errorf("separate tables %v: the plan's DOT lacks %q", c.separate, want)
			}
		}
	}
}

// deepModel is an MLP of the given depth and width 8, on synthetic data.
func deepModel(t *testing.T, layers int) *dsl.Graph {
	t.Helper()
	var b strings.Builder
	b.WriteString("psgraph: 1\nname: deep\ndata:\n  synthetic: {rows: 64, features: 8, classes: 8}\n  features: {name: x}\n  label: {name: y}\nparams:\n")
	for i := range layers {
		fmt.Fprintf(&b, "  W%d: {shape: [8, 8], init: {type: he_normal}}\n  b%d: {shape: [8]}\n", i, i)
	}
	b.WriteString("ops:\n")
	in := "x"
	for i := range layers {
		fmt.Fprintf(&b, "  - {type: matmul, inputs: [%s, W%d], outputs: [m%d]}\n  - {type: add, inputs: [m%d, b%d], outputs: [a%d]}\n  - {type: relu, inputs: [a%d], outputs: [r%d]}\n", in, i, i, i, i, i, i, i)
		in = fmt.Sprintf("r%d", i)
	}
	fmt.Fprintf(&b, "  - {type: softmax_cross_entropy, inputs: [%s, y], outputs: [loss]}\ntrain:\n  loss: loss\n  batch: 8\n  optimizer: {type: adam, lr: 0.01}\n", in)
	g, err := dsl.LoadBytes("deep.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

var svgSize = regexp.MustCompile(`<svg width="(\d+)pt" height="(\d+)pt"`)

// The skeleton of a 50-layer job fits on a 1920x1080 screen at 96 dpi, and
// collapsing the backward pass removes most nodes of the full picture.
func TestDeepPlanFitsOnAScreen(t *testing.T) {
	p, err := partition.Split(deepModel(t, 50), partition.Options{Trainers: 4, PServers: 4, Mode: partition.Sync, MinBlockSize: partition.DefaultMinBlockSize})
	if err != nil {
		t.Fatal(err)
	}
	skel := viz.Plan(p, viz.Options{CommOnly: true})
	if *update {
		os.WriteFile("testdata/deep-comm.dot", skel, 0o644)
	}
	svg, err := viz.RenderSVG(context.Background(), skel)
	if err != nil {
		t.Fatal(err)
	}
	m := svgSize.FindSubmatch(svg)
	if m == nil {
		t.Fatalf("no size in the SVG: %.200s", svg)
	}
	wpt, _ := strconv.Atoi(string(m[1]))
	hpt, _ := strconv.Atoi(string(m[2]))
	if wpx, hpx := wpt*96/72, hpt*96/72; wpx > 1920 || hpx > 1080 {
		t.Errorf("the --comm-only picture of 50 layers is %dx%d px, more than a 1920x1080 screen", wpx, hpx)
	}
	// --collapse-backward: the backward cluster is one box counting its ops
	g := deepModel(t, 50)
	nBackward := 0
	for _, op := range g.Ops {
		if op.Section == dsl.Backward {
			nBackward++
		}
	}
	dot := string(viz.Model(g, viz.Options{CollapseBackward: true}))
	i := strings.Index(dot, `subgraph "cluster_backward" {`)
	if i < 0 {
		t.Fatal("no backward cluster")
	}
	body := dot[i : i+strings.Index(dot[i:], "\n  }\n")]
	if n := strings.Count(body, " [label="); n != 1 || !strings.Contains(body, fmt.Sprintf("(%d ops)", nBackward)) {
		t.Errorf("collapsed backward cluster has %d nodes, want one box of %d ops:\n%s", n, nBackward, body)
	}
	// ... and each parameter's optimizer ops are one box in the optimize
	// cluster, counting that parameter's ops.
	perParam := map[string]int{}
	for _, op := range g.Ops {
		if op.Section == dsl.Optimize {
			perParam[op.Param]++
		}
	}
	i = strings.Index(dot, `subgraph "cluster_optimize" {`)
	if i < 0 {
		t.Fatal("no optimize cluster")
	}
	body = dot[i : i+strings.Index(dot[i:], "\n  }\n")]
	for p, n := range perParam {
		if want := fmt.Sprintf(`update of %s\n(%d ops)`, p, n); !strings.Contains(body, want) {
			t.Errorf("collapsed optimize cluster lacks the box %q:\n%.2000s", want, body)
		}
	}
	if n := strings.Count(body, "shape=box3d"); n != len(perParam) {
		t.Errorf("collapsed optimize cluster has %d boxes for %d parameters", n, len(perParam))
	}
}

// checkPNG renders the PNG and checks it decodes, has the SVG's size at
// 96 dpi, and is not blank: edges and outlines are drawn in dark pixels.
func checkPNG(t *testing.T, dot, svg []byte) {
	t.Helper()
	b, err := viz.RenderPNG(context.Background(), dot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the PNG does not decode: %v", err)
	}
	m := svgSize.FindSubmatch(svg)
	if m == nil {
		t.Fatal("no size in the SVG")
	}
	wpt, _ := strconv.Atoi(string(m[1]))
	hpt, _ := strconv.Atoi(string(m[2]))
	size := img.Bounds().Size()
	if d := size.X - wpt*96/72; d < -3 || d > 3 {
		t.Errorf("PNG is %d px wide, the SVG %d pt (%d px at 96 dpi)", size.X, wpt, wpt*96/72)
	}
	if d := size.Y - hpt*96/72; d < -3 || d > 3 {
		t.Errorf("PNG is %d px high, the SVG %d pt (%d px at 96 dpi)", size.Y, hpt, hpt*96/72)
	}
	dark := 0
	for y := 0; y < size.Y; y += 2 {
		for x := 0; x < size.X; x += 2 {
			if r, g, b, _ := img.At(x, y).RGBA(); r+g+b < 3*0x4000 {
				dark++
			}
		}
	}
	if dark < size.X*size.Y/2000 {
		t.Errorf("only %d dark pixels in %dx%d: are the edges and outlines drawn?", dark, size.X, size.Y)
	}
}
