package viz_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/viz"
	"github.com/psgraph/psgraph/partition"
)

var update = flag.Bool("update", false, "rewrite testdata/*.dot")

func digits(t *testing.T) *dsl.Graph {
	t.Helper()
	g, err := dsl.Load("../../examples/digits-mlp.yaml")
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
		t.Fatalf("%v (run go test ./dsl/viz -update to create it)", err)
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

// Every transfer of the plan is one dashed edge between two clusters.
func TestPlanDrawsEveryTransferOnce(t *testing.T) {
	for _, opt := range []viz.Options{{}, {CollapseBackward: true}, {CommOnly: true}} {
		p := digitsPlan(t, 2, 3, 1000)
		dot := string(viz.Plan(p, opt))
		if n, want := strings.Count(dot, "style=dashed"), len(p.Info.Transfers); n != want {
			t.Errorf("%+v: %d dashed edges for %d transfers", opt, n, want)
		}
		for _, tr := range p.Info.Transfers {
			if !strings.Contains(dot, `[label="`+tr.Var+" ") {
				t.Errorf("%+v: no edge labelled %s", opt, tr.Var)
			}
		}
		if !strings.Contains(dot, "rows [0, 22) of W1") {
			t.Errorf("%+v: the cut W1's blocks do not show their rows", opt)
		}
	}
}
